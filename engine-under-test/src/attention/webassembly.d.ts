// Node 20 provides WebAssembly, but this project's libs (ES2023 + @types/node, no DOM) declare none of it.
// The subset the KV memory and the attention kernel use:
declare global {
  namespace WebAssembly {
    interface MemoryDescriptor {
      initial: number;
      maximum?: number;
      shared?: boolean;
    }
    class Memory {
      constructor(descriptor: MemoryDescriptor);
      readonly buffer: ArrayBuffer | SharedArrayBuffer;
    }
    class Module {
      constructor(bytes: Uint8Array);
    }
    class Instance {
      constructor(module: Module, imports?: Record<string, Record<string, unknown>>);
      readonly exports: Record<string, unknown>;
    }
    function validate(bytes: Uint8Array): boolean;
  }
}

export {};
