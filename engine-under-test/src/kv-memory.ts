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
 * Writer tags travel with the bytes: a copy (a KV transfer, a host-offload load) carries each slot's tag
 * from its source, so ground truth names the request whose computation the data is, whoever moved it.
 *
 * Two threads write this memory at once in the disaggregated mode (decode's own writes, prefill's transfer
 * landing), so slot tags and page summaries are updated with Atomics (a compare-and-swap loop keeps the
 * summary consistent with every slot). Besides ground truth, each page carries what the engine itself may
 * use, all in shared memory so both threads see them:
 * - the page tag (`tagWriter`, `pageWriterGen`): who last wrote any slot of the page and under which
 *   generation they believed it was theirs; the `page-tags` defense compares it with owner and generation
 *   before every read (a page someone else wrote, or wrote under an older allocation, fails the read);
 * - `leases`: copies and transfers that may still touch the page (one-sided writes in flight, host copies);
 *   the `deferred-release` defense keeps a released page off the free list until its leases are gone;
 * - `lock`: a spin lock per page, taken by the allocator when it changes owner or generation and by a
 *   checked copy (`transfer-integrity`) around its verify-then-write, so the check cannot go stale midway.
 */

export const D_HEAD = 64;
/** Floats per slot: one key and one value vector. */
export const FLOATS_PER_SLOT = 2 * D_HEAD;
export const NEVER_WRITTEN = -1;
export const MIXED_WRITERS = -2;
export const NO_OWNER = -1;

/**
 * Page states. `pendingRelease`: released by its owner but held off the free list until no copy or transfer
 * can still touch it (the `deferred-release` defense); the owner field still names the releasing table.
 */
export const PageState = { free: 0, allocated: 1, pendingRelease: 2 } as const;

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
/** Int32 fields per page in the metadata area (see the KvMemory fields of the same names). */
const PAGE_FIELDS = 9;

/** Where a copy reads slots from: a KV memory, or a page-sized host buffer with the same layout. */
export interface SlotSource {
  readonly pageSize: number;
  /** Pages of pageSize slots, K of every slot then V of every slot, as in KvMemory.data. */
  readonly data: Float32Array;
  /** Writer tag per slot, page after page. */
  readonly slotWriter: Int32Array;
}

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
  const metaBytes = 4 * (PAGE_FIELDS * numPages + numPages * pageSize);
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
  /** Per page: the generation the latest writer believed the page had when it wrote (page tag, with tagWriter). */
  readonly pageWriterGen: Int32Array;
  /** Per page: the id the latest write of any slot was made under (page tag; NEVER_WRITTEN after zeroing). */
  readonly tagWriter: Int32Array;
  /** Per page: copies or transfers that may still touch it (Atomics). */
  readonly leases: Int32Array;
  /** Per page: 0 unlocked, 1 locked (Atomics spin lock). */
  readonly lock: Int32Array;
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
    this.tagWriter = ints(n);
    this.leases = ints(n);
    this.lock = ints(n);
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
      this.tagWriter.fill(NEVER_WRITTEN);
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
    // A plain store: writeKv is the page's own thread writing (prefill into its pool, decode into its own
    // tokens); a copy from another thread goes through copySlots, whose stores are sequentially consistent.
    this.slotWriter[page * this.pageSize + slot] = writer;
    this.stampTag(page, slot + 1, writer, writerGen);
    // Already summarised as ours: our slot agrees with it, and any other writer's slot triggers its own update.
    if (Atomics.load(this.pageWriter, page) !== writer) this.refreshSummary(page);
  }

  private stampTag(page: number, slotsAtLeast: number, tagWriter: number, tagGen: number): void {
    this.tagWriter[page] = tagWriter;
    this.pageWriterGen[page] = tagGen;
    if ((this.tokensWritten[page] as number) < slotsAtLeast) this.tokensWritten[page] = slotsAtLeast;
  }

  /**
   * Recomputes a page's writer summary from its slot tags. The compare-and-swap retries if another thread
   * changed the summary meanwhile, so the last successful update always reflects a scan made after every
   * slot store that preceded it (each writer stores its slot before calling this).
   */
  private refreshSummary(page: number): void {
    const P = this.pageSize;
    for (;;) {
      const before = Atomics.load(this.pageWriter, page);
      let summary = NEVER_WRITTEN;
      for (let s = page * P, end = s + P; s < end; s++) {
        const w = Atomics.load(this.slotWriter, s);
        if (w === NEVER_WRITTEN || w === summary) continue;
        if (summary === NEVER_WRITTEN) summary = w;
        else {
          summary = MIXED_WRITERS;
          break;
        }
      }
      if (Atomics.compareExchange(this.pageWriter, page, before, summary) === before) return;
    }
  }

  /**
   * Copies slots [fromSlot, fromSlot + count) of page `srcPage` of `src` into the same slots of page
   * `dstPage` here. Each slot keeps the writer tag it had at the source (ground truth follows the bytes),
   * except that `restamp.from` becomes `restamp.to` (a host-cache load: data computed by the entry's origin
   * for the very tokens the loader has is the loader's own). The page tag becomes (tagWriter, tagGen): the
   * request on whose behalf the copy was made.
   */
  copySlots(
    src: SlotSource,
    srcPage: number,
    dstPage: number,
    fromSlot: number,
    count: number,
    tagWriter: number,
    tagGen: number,
    restamp?: { from: number; to: number },
  ): void {
    const P = this.pageSize;
    if (src.pageSize !== P) throw new KvMemoryError('KV_LAYOUT_INVALID', `cannot copy pages of ${src.pageSize} slots into pages of ${P}`);
    if (count <= 0) return;
    const pageFloats = P * FLOATS_PER_SLOT;
    const vRegion = P * D_HEAD;
    const s0 = srcPage * pageFloats;
    const d0 = dstPage * pageFloats;
    const a = fromSlot * D_HEAD;
    const b = (fromSlot + count) * D_HEAD;
    this.data.set(src.data.subarray(s0 + a, s0 + b), d0 + a);
    this.data.set(src.data.subarray(s0 + vRegion + a, s0 + vRegion + b), d0 + vRegion + a);
    for (let s = fromSlot; s < fromSlot + count; s++) {
      let w = src.slotWriter[srcPage * P + s] as number;
      if (restamp !== undefined && w === restamp.from) w = restamp.to;
      Atomics.store(this.slotWriter, dstPage * P + s, w);
    }
    this.stampTag(dstPage, fromSlot + count, tagWriter, tagGen);
    this.refreshSummary(dstPage);
  }

  /**
   * Takes the page's lock. Spins briefly (a copy holds it for microseconds), then sleeps until the holder
   * lets go: a decode read holds its pages for a whole attention kernel (readFenced), and on a busy host a
   * spinning thread would only take the CPU from the holder.
   */
  lockPage(page: number): void {
    for (let spins = 0; Atomics.compareExchange(this.lock, page, 0, 1) !== 0; spins++) {
      if (spins >= 64) Atomics.wait(this.lock, page, 1, 1);
    }
  }

  unlockPage(page: number): void {
    Atomics.store(this.lock, page, 0);
    Atomics.notify(this.lock, page, 1);
  }

  /**
   * Runs `read` (a ground-truth scan and the attention kernel over the first `numPositions` positions of
   * `pages`) with every page it covers that another thread may still write locked, in ascending page order
   * (the order every multi-page locker uses: no deadlock). A one-sided write from another thread takes the
   * same locks, so it lands wholly before or wholly after the read: what the scan counts is exactly what
   * the kernel read. Only leased pages can be written from elsewhere (a transfer leases its pages until its
   * last batch has landed, and only the reading thread adds leases), so the others need no lock.
   */
  readFenced<T>(pages: Int32Array, numPositions: number, read: () => T): T {
    const count = Math.ceil(numPositions / this.pageSize);
    const locked = pages.subarray(0, count).filter((page) => Atomics.load(this.leases, page) > 0).sort();
    let last = -1;
    for (const page of locked) if (page !== last) this.lockPage((last = page));
    try {
      return read();
    } finally {
      last = -1;
      for (const page of locked) if (page !== last) this.unlockPage((last = page));
    }
  }

  /**
   * The `page-tags` check for a read of the first `numPositions` positions of `pages` by `reader`: every
   * page must be owned by the reader and carry the reader's tag under its current generation. Returns the
   * first page that does not (its index in `pages`), or undefined.
   */
  verifyTags(pages: Int32Array, numPositions: number, reader: number): { index: number; page: number } | undefined {
    const pageCount = Math.ceil(numPositions / this.pageSize);
    for (let i = 0; i < pageCount; i++) {
      const page = pages[i] as number;
      if (this.owner[page] !== reader || this.tagWriter[page] !== reader || this.pageWriterGen[page] !== this.generation[page]) {
        return { index: i, page };
      }
    }
    return undefined;
  }

  /** Zeroes a page's data and clears its writer tags (the `zero-on-release` behaviour). */
  zeroPage(page: number): void {
    const floats = this.pageSize * FLOATS_PER_SLOT;
    this.data.fill(0, page * floats, (page + 1) * floats);
    this.slotWriter.fill(NEVER_WRITTEN, page * this.pageSize, (page + 1) * this.pageSize);
    this.pageWriter[page] = NEVER_WRITTEN;
    this.tagWriter[page] = NEVER_WRITTEN;
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
