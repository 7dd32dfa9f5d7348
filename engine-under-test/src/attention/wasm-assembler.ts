/**
 * A minimal WebAssembly binary writer: just enough to emit the attention kernel from readable TypeScript
 * (one imported shared memory, a few functions, SIMD). Writing the kernel here instead of shipping a
 * compiled blob keeps it reviewable and needs no toolchain: a newcomer never runs a build step.
 *
 * Encoding reference: the WebAssembly core spec (binary format) and the SIMD proposal's opcode table.
 * SIMD opcodes are a 0xfd prefix followed by the opcode as unsigned LEB128.
 */

export const ValType = { i32: 0x7f, i64: 0x7e, f32: 0x7d, f64: 0x7c, v128: 0x7b } as const;
export type ValType = (typeof ValType)[keyof typeof ValType];

function uleb(value: number, out: number[]): void {
  let v = value >>> 0;
  do {
    let byte = v & 0x7f;
    v >>>= 7;
    if (v !== 0) byte |= 0x80;
    out.push(byte);
  } while (v !== 0);
}

function sleb(value: number, out: number[]): void {
  let v = value | 0;
  for (;;) {
    const byte = v & 0x7f;
    v >>= 7;
    const done = (v === 0 && (byte & 0x40) === 0) || (v === -1 && (byte & 0x40) !== 0);
    out.push(done ? byte : byte | 0x80);
    if (done) return;
  }
}

const f32Scratch = new DataView(new ArrayBuffer(4));

/** One function body under construction; methods are named after the WAT instructions they emit. */
export class Code {
  readonly bytes: number[] = [];
  private readonly localTypes: ValType[] = [];

  constructor(private readonly paramCount: number) {}

  /** Declares a local and returns its index (params come first). */
  local(type: ValType): number {
    this.localTypes.push(type);
    return this.paramCount + this.localTypes.length - 1;
  }

  private op(...bytes: number[]): this {
    this.bytes.push(...bytes);
    return this;
  }
  private simd(opcode: number, ...imm: number[]): this {
    this.bytes.push(0xfd);
    uleb(opcode, this.bytes);
    this.bytes.push(...imm);
    return this;
  }
  private memarg(offset: number, alignLog2: number): number[] {
    const out: number[] = [];
    uleb(alignLog2, out);
    uleb(offset, out);
    return out;
  }

  // control
  block(): this { return this.op(0x02, 0x40); }
  loop(): this { return this.op(0x03, 0x40); }
  if_(): this { return this.op(0x04, 0x40); }
  else_(): this { return this.op(0x05); }
  end(): this { return this.op(0x0b); }
  br(depth: number): this { return this.op(0x0c, depth); }
  br_if(depth: number): this { return this.op(0x0d, depth); }
  return_(): this { return this.op(0x0f); }
  call(fn: number): this { this.bytes.push(0x10); uleb(fn, this.bytes); return this; }
  select(): this { return this.op(0x1b); }
  drop(): this { return this.op(0x1a); }

  // variables
  local_get(i: number): this { this.bytes.push(0x20); uleb(i, this.bytes); return this; }
  local_set(i: number): this { this.bytes.push(0x21); uleb(i, this.bytes); return this; }
  local_tee(i: number): this { this.bytes.push(0x22); uleb(i, this.bytes); return this; }

  // memory (offsets are static byte offsets added to the address on the stack)
  i32_load(offset = 0): this { return this.op(0x28, ...this.memarg(offset, 2)); }
  f32_load(offset = 0): this { return this.op(0x2a, ...this.memarg(offset, 2)); }
  f32_store(offset = 0): this { return this.op(0x38, ...this.memarg(offset, 2)); }
  v128_load(offset = 0): this { return this.simd(0x00, ...this.memarg(offset, 4)); }
  v128_load32_splat(offset = 0): this { return this.simd(0x09, ...this.memarg(offset, 2)); }
  v128_store(offset = 0): this { return this.simd(0x0b, ...this.memarg(offset, 4)); }

  // constants
  i32_const(v: number): this { this.bytes.push(0x41); sleb(v, this.bytes); return this; }
  f32_const(v: number): this {
    f32Scratch.setFloat32(0, v, true);
    return this.op(0x43, f32Scratch.getUint8(0), f32Scratch.getUint8(1), f32Scratch.getUint8(2), f32Scratch.getUint8(3));
  }
  /** v128.const with four f32 lanes. */
  f32x4_const(a: number, b = a, c = a, d = a): this {
    const imm: number[] = [];
    for (const v of [a, b, c, d]) {
      f32Scratch.setFloat32(0, v, true);
      imm.push(f32Scratch.getUint8(0), f32Scratch.getUint8(1), f32Scratch.getUint8(2), f32Scratch.getUint8(3));
    }
    return this.simd(0x0c, ...imm);
  }
  /** v128.const with four i32 lanes. */
  i32x4_const(v: number): this {
    const imm: number[] = [];
    for (let i = 0; i < 4; i++) imm.push(v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff);
    return this.simd(0x0c, ...imm);
  }

  // i32
  i32_add(): this { return this.op(0x6a); }
  i32_sub(): this { return this.op(0x6b); }
  i32_mul(): this { return this.op(0x6c); }
  i32_eq(): this { return this.op(0x46); }
  i32_ge_u(): this { return this.op(0x4f); }
  i32_lt_u(): this { return this.op(0x49); }

  // f32
  f32_add(): this { return this.op(0x92); }
  f32_sub(): this { return this.op(0x93); }
  f32_mul(): this { return this.op(0x94); }
  f32_max(): this { return this.op(0x97); }
  f32_gt(): this { return this.op(0x5e); }

  // SIMD
  f32x4_splat(): this { return this.simd(0x13); }
  f32x4_extract_lane(lane: number): this { return this.simd(0x1f, lane); }
  f32x4_lt(): this { return this.simd(0x43); }
  v128_andnot(): this { return this.simd(0x4f); }
  f32x4_nearest(): this { return this.simd(0x6a); }
  i32x4_shl(): this { return this.simd(0xab); }
  i32x4_add(): this { return this.simd(0xae); }
  f32x4_add(): this { return this.simd(0xe4); }
  f32x4_sub(): this { return this.simd(0xe5); }
  f32x4_mul(): this { return this.simd(0xe6); }
  f32x4_min(): this { return this.simd(0xe8); }
  f32x4_max(): this { return this.simd(0xe9); }
  i32x4_trunc_sat_f32x4_s(): this { return this.simd(0xf8); }

  /** The function body as encoded in the code section (locals declaration, instructions, `end`). */
  encode(): number[] {
    const body: number[] = [];
    uleb(this.localTypes.length, body);
    for (const t of this.localTypes) body.push(1, t); // one local per entry: simple and small enough
    body.push(...this.bytes, 0x0b);
    const out: number[] = [];
    uleb(body.length, out);
    out.push(...body);
    return out;
  }
}

export interface FunctionDef {
  name?: string; // exported under this name when set
  params: ValType[];
  results: ValType[];
  code: Code;
}

export interface MemoryImport {
  module: string;
  name: string;
  initialPages: number;
  maximumPages: number;
  shared: boolean;
}

function section(id: number, payload: number[], out: number[]): void {
  out.push(id);
  uleb(payload.length, out);
  out.push(...payload);
}

function name(s: string, out: number[]): void {
  const bytes = Buffer.from(s, 'utf8');
  uleb(bytes.length, out);
  out.push(...bytes);
}

/** Encodes a module: one imported memory, then the given functions (function index = array index). */
export function encodeModule(memory: MemoryImport, functions: FunctionDef[]): Uint8Array {
  const out: number[] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

  const types: number[] = [];
  uleb(functions.length, types);
  for (const f of functions) {
    types.push(0x60);
    uleb(f.params.length, types);
    types.push(...f.params);
    uleb(f.results.length, types);
    types.push(...f.results);
  }
  section(1, types, out);

  const imports: number[] = [];
  uleb(1, imports);
  name(memory.module, imports);
  name(memory.name, imports);
  imports.push(0x02, memory.shared ? 0x03 : 0x01);
  uleb(memory.initialPages, imports);
  uleb(memory.maximumPages, imports);
  section(2, imports, out);

  const funcs: number[] = [];
  uleb(functions.length, funcs);
  functions.forEach((_, i) => uleb(i, funcs));
  section(3, funcs, out);

  const exported = functions.map((f, i) => ({ f, i })).filter(({ f }) => f.name !== undefined);
  const exports: number[] = [];
  uleb(exported.length, exports);
  for (const { f, i } of exported) {
    name(f.name as string, exports);
    exports.push(0x00);
    uleb(i, exports);
  }
  section(7, exports, out);

  const code: number[] = [];
  uleb(functions.length, code);
  for (const f of functions) code.push(...f.code.encode());
  section(10, code, out);

  return Uint8Array.from(out);
}
