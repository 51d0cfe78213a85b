/**
 * Hand-assembled static i386 executables for tests of the 32-bit syscall path: an x86-64 host with
 * IA32 emulation runs them (no 32-bit libraries needed), and their syscalls reach seccomp as
 * SCMP_ARCH_X86. Each makes one socket and exits with the low byte of the result: a file
 * descriptor (3) on success, 256 - errno on failure.
 */

const BASE = 0x08048000;
const HEADERS = 52 + 32;
const SYS_EXIT = 1;
const SYS_SOCKETCALL = 102;
const SYS_SOCKET = 359;
const SOCKETCALL_SOCKET = 1;
const SOCK_STREAM = 1;

const imm32 = (n: number): number[] => [n & 255, (n >>> 8) & 255, (n >>> 16) & 255, (n >>> 24) & 255];
// mov ebx, eax; mov eax, SYS_EXIT; int 0x80
const EXIT_WITH_RESULT = [0x89, 0xc3, 0xb8, ...imm32(SYS_EXIT), 0xcd, 0x80];

/** An ELF32 executable of one read+execute segment holding `code`, which starts at the entry point. */
function elf32(code: number[]): Buffer {
  const b = Buffer.alloc(HEADERS + code.length);
  b.set([0x7f, 0x45, 0x4c, 0x46, 1, 1, 1], 0); // magic, 32-bit, little-endian, version 1
  b.writeUInt16LE(2, 16); // ET_EXEC
  b.writeUInt16LE(3, 18); // EM_386
  b.writeUInt32LE(1, 20);
  b.writeUInt32LE(BASE + HEADERS, 24); // entry
  b.writeUInt32LE(52, 28); // program headers right after this header
  b.writeUInt16LE(52, 40);
  b.writeUInt16LE(32, 42);
  b.writeUInt16LE(1, 44);
  b.writeUInt32LE(1, 52); // PT_LOAD of the whole file
  b.writeUInt32LE(0, 56);
  b.writeUInt32LE(BASE, 60);
  b.writeUInt32LE(BASE, 64);
  b.writeUInt32LE(b.length, 68);
  b.writeUInt32LE(b.length, 72);
  b.writeUInt32LE(5, 76); // PF_R | PF_X
  b.writeUInt32LE(0x1000, 80);
  b.set(code, HEADERS);
  return b;
}

/** socketcall(SYS_SOCKET, {family, SOCK_STREAM, 0}): the arguments are in memory, out of seccomp's sight. */
export function i386SocketcallSocket(family: number): Buffer {
  return elf32([
    0x6a, 0x00, // push 0 (protocol)
    0x6a, SOCK_STREAM, // push type
    0x68, ...imm32(family), // push family
    0x89, 0xe1, // mov ecx, esp
    0xbb, ...imm32(SOCKETCALL_SOCKET), // mov ebx, SYS_SOCKET
    0xb8, ...imm32(SYS_SOCKETCALL), // mov eax, __NR_socketcall
    0xcd, 0x80, // int 0x80
    ...EXIT_WITH_RESULT,
  ]);
}

/** The direct i386 socket(family, SOCK_STREAM, 0) syscall (Linux 4.3+). */
export function i386Socket(family: number): Buffer {
  return elf32([
    0xbb, ...imm32(family), // mov ebx, family
    0xb9, ...imm32(SOCK_STREAM), // mov ecx, type
    0x31, 0xd2, // xor edx, edx
    0xb8, ...imm32(SYS_SOCKET), // mov eax, __NR_socket
    0xcd, 0x80, // int 0x80
    ...EXIT_WITH_RESULT,
  ]);
}

/** What the probe's exit status says: 'fd' for a socket, else the errno. */
export function i386Result(status: number | null): string {
  if (status === null) return 'killed';
  return status < 128 ? 'fd' : String(256 - status);
}
