/**
 * KV memory: the bytes behind the KV pool, laid out so that they can be shared between threads.
 *
 * Everything lives in ONE buffer (a shared `WebAssembly.Memory` by default, whose buffer is a
 * SharedArrayBuffer): a small header, per-thread attention scratch areas, per-page metadata as Int32Arrays,
 * then the page data as one Float32Array. Page p holds K for its `pageSize` slots, then V for them
 * (`pageSize * 64` floats each). A second thread (the prefill worker of the disaggregated mode) attaches to
 * the same buffer with `KvMemory.attach` and writes KV straight into it: a one-sided write, like RDMA.
 *
 * Ground truth lives here too. Every slot carries a writer tag: the id of the request whose data the slot
 * last received (`NEVER_WRITTEN` after creation or zeroing). `pageWriter` summarises a page: the single
 * writer of all its written slots, or `MIXED_WRITERS`. Reuse does not clear tags (nor data): a recycled
 * page keeps naming the request whose data it still holds, which is exactly what makes a foreign read
 * detectable. Allocation state (owner, generation, state) is written only by the allocator (`KvPool`).
 */

export const D_HEAD = 64;
/** Floats per slot: one key and one value vector. */
export const FLOATS_PER_SLOT = 2 * D_HEAD;
export const NEVER_WRITTEN = -1;
export const MIXED_WRITERS = -2;
export const NO_OWNER = -1;

/** Page states. The disaggregated mode adds states of its own (e.g. pending release) above these. */
export const PageState = { free: 0, allocated: 1 } as const;

/** How many threads may each run an attention kernel over one memory (each needs its own scratch). */
export const SCRATCH_AREAS = 4;
const MAGIC = 0x6b76636d; // "kvcm"
const HEADER_BYTES = 64;
const WASM_PAGE = 65536;
const MAX_BYTES = 4 * 1024 * 1024 * 1024 - WASM_PAGE; // wasm32 addressing

export interface KvMemoryShape {
  numPages: number;
  /** Slots per page; a multiple of 4 (the SIMD kernel works on 4 slots at a time). */
  pageSize: number;
}

export interface KvLayout extends KvMemoryShape {
  scratchOffset: number;
  scratchBytes: number;
  /** Offsets inside one scratch area. */
  scratch: { q: number; o: number; scores: number; pageTable: number };
  metaOffset: number;
  dataOffset: number;
  totalBytes: number;
  wasmPages: number;
}

export class KvMemoryError extends Error {
  constructor(readonly code: 'KV_LAYOUT_INVALID' | 'KV_BUFFER_MISMATCH' | 'KV_SCRATCH_EXHAUSTED', message: string) {
    super(message);
    this.name = 'KvMemoryError';
  }
}

const align = (n: number, to: number): number => Math.ceil(n / to) * to;

export function kvLayout(shape: KvMemoryShape): KvLayout {
  const { numPages, pageSize } = shape;
  if (!Number.isInteger(numPages) || numPages < 1) {
    throw new KvMemoryError('KV_LAYOUT_INVALID', `numPages must be an integer >= 1, got ${numPages}`);
  }
  if (!Number.isInteger(pageSize) || pageSize < 4 || pageSize > 1024 || pageSize % 4 !== 0) {
    throw new KvMemoryError('KV_LAYOUT_INVALID', `pageSize must be a multiple of 4 in [4, 1024], got ${pageSize}`);
  }
  const scratch = { q: 0, o: 4 * D_HEAD, scores: 8 * D_HEAD, pageTable: align(8 * D_HEAD + 4 * (pageSize + 4), 64) };
  const scratchBytes = align(scratch.pageTable + 4 * numPages, 64);
  const scratchOffset = HEADER_BYTES;
  const metaOffset = scratchOffset + SCRATCH_AREAS * scratchBytes;
  const metaBytes = 4 * (6 * numPages + numPages * pageSize);
  const dataOffset = align(metaOffset + metaBytes, 64);
  const totalBytes = dataOffset + 4 * numPages * pageSize * FLOATS_PER_SLOT;
  if (totalBytes > MAX_BYTES) {
    throw new KvMemoryError(
      'KV_LAYOUT_INVALID',
      `a pool of ${numPages} pages of ${pageSize} slots needs ${totalBytes} bytes, over the 4 GiB a wasm32 memory can address`,
    );
  }
  return { numPages, pageSize, scratchOffset, scratchBytes, scratch, metaOffset, dataOffset, totalBytes, wasmPages: Math.ceil(totalBytes / WASM_PAGE) };
}

export interface KvMemoryOptions extends KvMemoryShape {
  /** Back the memory with a SharedArrayBuffer so other threads can attach. @default true */
  shared?: boolean;
}

export class KvMemory {
  readonly layout: KvLayout;
  readonly buffer: ArrayBuffer | SharedArrayBuffer;
  /** Present when the memory is a WebAssembly.Memory: the SIMD attention kernel needs it. */
  readonly wasmMemory: WebAssembly.Memory | undefined;
  readonly pageSize: number;
  readonly numPages: number;
  /** K and V of every page: page p starts at p * pageSize * 128. */
  readonly data: Float32Array;
  /** Per page: the request (or room) that owns it, NO_OWNER when free. Written by the allocator. */
  readonly owner: Int32Array;
  /** Per page: incremented on every allocation. */
  readonly generation: Int32Array;
  readonly state: Int32Array;
  /** Per page: high-water mark of slots written since the page's latest allocation. */
  readonly tokensWritten: Int32Array;
  /** Per page: the single writer of all its written slots, NEVER_WRITTEN, or MIXED_WRITERS. */
  readonly pageWriter: Int32Array;
  /** Per page: the generation the latest writer believed the page had when it wrote. */
  readonly pageWriterGen: Int32Array;
  /** Per slot: the id of the request whose data the slot holds (NEVER_WRITTEN if none). */
  readonly slotWriter: Int32Array;
  private readonly header: Int32Array;

  private constructor(layout: KvLayout, buffer: ArrayBuffer | SharedArrayBuffer, wasmMemory: WebAssembly.Memory | undefined, init: boolean) {
    this.layout = layout;
    this.buffer = buffer;
    this.wasmMemory = wasmMemory;
    this.pageSize = layout.pageSize;
    this.numPages = layout.numPages;
    const n = layout.numPages;
    this.header = new Int32Array(buffer, 0, HEADER_BYTES / 4);
    let off = layout.metaOffset;
    const ints = (count: number): Int32Array => {
      const a = new Int32Array(buffer, off, count);
      off += 4 * count;
      return a;
    };
    this.owner = ints(n);
    this.generation = ints(n);
    this.state = ints(n);
    this.tokensWritten = ints(n);
    this.pageWriter = ints(n);
    this.pageWriterGen = ints(n);
    this.slotWriter = ints(n * layout.pageSize);
    this.data = new Float32Array(buffer, layout.dataOffset, n * layout.pageSize * FLOATS_PER_SLOT);
    if (init) {
      this.header[0] = MAGIC;
      this.header[1] = n;
      this.header[2] = layout.pageSize;
      this.header[3] = 0; // scratch areas claimed
      this.owner.fill(NO_OWNER);
      this.state.fill(PageState.free);
      this.pageWriter.fill(NEVER_WRITTEN);
      this.slotWriter.fill(NEVER_WRITTEN);
    }
  }

  /** Allocates a fresh memory (zero-filled: the OS hands out zero pages, so this is cheap at any size). */
  static create(options: KvMemoryOptions): KvMemory {
    const layout = kvLayout(options);
    const shared = options.shared ?? true;
    const memory = new WebAssembly.Memory({ initial: layout.wasmPages, maximum: layout.wasmPages, shared });
    return new KvMemory(layout, memory.buffer, memory, true);
  }

  /**
   * Attaches to a memory created by `create` (possibly in another thread). Pass the WebAssembly.Memory
   * to keep the SIMD kernel available, or just its buffer for read/write access only.
   */
  static attach(shape: KvMemoryShape, memory: WebAssembly.Memory | SharedArrayBuffer | ArrayBuffer): KvMemory {
    const layout = kvLayout(shape);
    const wasmMemory = memory instanceof WebAssembly.Memory ? memory : undefined;
    const buffer = wasmMemory !== undefined ? wasmMemory.buffer : (memory as SharedArrayBuffer | ArrayBuffer);
    if (buffer.byteLength < layout.totalBytes) {
      throw new KvMemoryError('KV_BUFFER_MISMATCH', `buffer holds ${buffer.byteLength} bytes, layout needs ${layout.totalBytes}`);
    }
    const header = new Int32Array(buffer, 0, 4);
    if (header[0] !== MAGIC || header[1] !== shape.numPages || header[2] !== shape.pageSize) {
      throw new KvMemoryError(
        'KV_BUFFER_MISMATCH',
        `buffer was not created as a KV memory of ${shape.numPages} pages x ${shape.pageSize} slots`,
      );
    }
    return new KvMemory(layout, buffer, wasmMemory, false);
  }

  /** Reserves one attention scratch area for the calling thread's kernel. */
  claimScratchArea(): number {
    const index = Atomics.add(this.header, 3, 1);
    if (index >= SCRATCH_AREAS) {
      throw new KvMemoryError('KV_SCRATCH_EXHAUSTED', `all ${SCRATCH_AREAS} attention scratch areas are in use`);
    }
    return this.layout.scratchOffset + index * this.layout.scratchBytes;
  }

  /** Float index of slot `slot`'s key in page `page`; its value is at `+ pageSize * 64`. */
  keyOffset(page: number, slot: number): number {
    return page * this.pageSize * FLOATS_PER_SLOT + slot * D_HEAD;
  }

  /**
   * Writes one slot's K and V and stamps its writer: the single write primitive, used by prefill, decode
   * and (in the disaggregated mode) the transfer path, so that every byte in the pool has a known author.
   * `writerGen` is the page generation the writer believes it is writing under.
   */
  writeKv(page: number, slot: number, key: Float32Array, keyOff: number, value: Float32Array, valueOff: number, writer: number, writerGen: number): void {
    const data = this.data;
    const k = this.keyOffset(page, slot);
    const v = k + this.pageSize * D_HEAD;
    for (let d = 0; d < D_HEAD; d++) {
      data[k + d] = key[keyOff + d] as number;
      data[v + d] = value[valueOff + d] as number;
    }
    this.stampWriter(page, slot, writer, writerGen);
  }

  private stampWriter(page: number, slot: number, writer: number, writerGen: number): void {
    const P = this.pageSize;
    this.slotWriter[page * P + slot] = writer;
    this.pageWriterGen[page] = writerGen;
    if ((this.tokensWritten[page] as number) < slot + 1) this.tokensWritten[page] = slot + 1;
    const current = this.pageWriter[page];
    if (current === writer) return;
    // The page held someone else's data (or none): it stays mixed until every stale slot is overwritten.
    let uniform = true;
    for (let s = page * P, end = s + P; s < end; s++) {
      const w = this.slotWriter[s];
      if (w !== writer && w !== NEVER_WRITTEN) {
        uniform = false;
        break;
      }
    }
    this.pageWriter[page] = uniform ? writer : MIXED_WRITERS;
  }

  /** Zeroes a page's data and clears its writer tags (the `zero-on-release` behaviour). */
  zeroPage(page: number): void {
    const floats = this.pageSize * FLOATS_PER_SLOT;
    this.data.fill(0, page * floats, (page + 1) * floats);
    this.slotWriter.fill(NEVER_WRITTEN, page * this.pageSize, (page + 1) * this.pageSize);
    this.pageWriter[page] = NEVER_WRITTEN;
    this.tokensWritten[page] = 0;
  }

  /**
   * Ground truth for one attention read of the first `numPositions` positions of `pages` by `reader`:
   * the pages holding data written by another request, and those writers. Cheap when clean (one Int32
   * compare per page); slots are examined only on pages whose summary names someone else.
   */
  foreignReads(pages: Int32Array, numPositions: number, reader: number): { pages: number[]; writers: number[] } | undefined {
    const P = this.pageSize;
    const pageCount = Math.ceil(numPositions / P);
    let foreignPages: number[] | undefined;
    let writers: Set<number> | undefined;
    for (let i = 0; i < pageCount; i++) {
      const page = pages[i] as number;
      const summary = this.pageWriter[page];
      if (summary === reader || summary === NEVER_WRITTEN) continue;
      const slots = i === pageCount - 1 ? numPositions - i * P : P;
      let foreign = false;
      for (let s = page * P, end = s + slots; s < end; s++) {
        const w = this.slotWriter[s] as number;
        if (w !== reader && w !== NEVER_WRITTEN) {
          foreign = true;
          (writers ??= new Set()).add(w);
        }
      }
      if (foreign) (foreignPages ??= []).push(page);
    }
    return foreignPages === undefined ? undefined : { pages: foreignPages, writers: [...(writers ?? [])] };
  }
}
