import { dlopen, FFIType } from "bun:ffi";

const PR_SET_DUMPABLE = 4;

/**
 * Marks this process non-dumpable. Commands we run execute as the same user; without this they
 * could read our memory and `/proc/<pid>/environ` (which may hold the admin PIN or other secrets).
 * Children are unaffected: exec makes a new program dumpable again. Returns false when prctl is
 * unavailable (non-Linux, or a libc we cannot open), which only loses this extra layer.
 */
export function makeNonDumpable(): boolean {
  try {
    const lib = dlopen("libc.so.6", {
      prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
    });
    const ok = lib.symbols.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) === 0;
    lib.close();
    return ok;
  } catch {
    return false;
  }
}
