/**
 * A seccomp filter (classic BPF, as bubblewrap's `--seccomp FD` reads it) that refuses the
 * system calls sandboxed programs have no use for and that widen the kernel's attack
 * surface: tracing other processes, BPF, perf, userfaultfd, keyrings, io_uring, module and
 * kexec loading, mounting and namespace changes. Everything else is allowed.
 * @internal
 */

/** Names of the refused calls; io_uring answers ENOSYS so runtimes fall back quietly. */
const REFUSED_WITH_EPERM = [
  'ptrace', 'process_vm_readv', 'process_vm_writev', 'perf_event_open', 'bpf', 'userfaultfd',
  'keyctl', 'add_key', 'request_key', 'kexec_load', 'kexec_file_load', 'init_module',
  'finit_module', 'delete_module', 'mount', 'umount2', 'pivot_root', 'unshare', 'setns',
  'chroot', 'swapon', 'swapoff', 'reboot', 'acct', 'open_by_handle_at', 'name_to_handle_at',
  'lookup_dcookie', 'open_tree', 'move_mount', 'fsopen', 'fsconfig', 'fsmount', 'fspick',
  'mount_setattr', 'quotactl', 'vhangup', 'syslog',
] as const;
const REFUSED_WITH_ENOSYS = ['io_uring_setup', 'io_uring_enter', 'io_uring_register'] as const;
type SyscallName = (typeof REFUSED_WITH_EPERM)[number] | (typeof REFUSED_WITH_ENOSYS)[number];

interface ArchitectureTable {
  /** AUDIT_ARCH_* value the kernel puts in seccomp_data.arch. */
  auditArch: number;
  /** System-call numbers above which another ABI lives (x32 on x86-64), refused whole. */
  foreignAbiBase?: number;
  numbers: Record<SyscallName, number>;
}

/** Numbers from the kernel's uapi headers: asm/unistd_64.h (x86-64) and
 * asm-generic/unistd.h (arm64). */
const ARCHITECTURES: Partial<Record<NodeJS.Architecture, ArchitectureTable>> = {
  x64: {
    auditArch: 0xc000003e,
    foreignAbiBase: 0x40000000,
    numbers: {
      ptrace: 101, process_vm_readv: 310, process_vm_writev: 311, perf_event_open: 298, bpf: 321,
      userfaultfd: 323, keyctl: 250, add_key: 248, request_key: 249, kexec_load: 246,
      kexec_file_load: 320, init_module: 175, finit_module: 313, delete_module: 176, mount: 165,
      umount2: 166, pivot_root: 155, unshare: 272, setns: 308, chroot: 161, swapon: 167,
      swapoff: 168, reboot: 169, acct: 163, open_by_handle_at: 304, name_to_handle_at: 303,
      lookup_dcookie: 212, open_tree: 428, move_mount: 429, fsopen: 430, fsconfig: 431,
      fsmount: 432, fspick: 433, mount_setattr: 442, quotactl: 179, vhangup: 153, syslog: 103,
      io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    },
  },
  arm64: {
    auditArch: 0xc00000b7,
    numbers: {
      ptrace: 117, process_vm_readv: 270, process_vm_writev: 271, perf_event_open: 241, bpf: 280,
      userfaultfd: 282, keyctl: 219, add_key: 217, request_key: 218, kexec_load: 104,
      kexec_file_load: 294, init_module: 105, finit_module: 273, delete_module: 106, mount: 40,
      umount2: 39, pivot_root: 41, unshare: 97, setns: 268, chroot: 51, swapon: 224,
      swapoff: 225, reboot: 142, acct: 89, open_by_handle_at: 265, name_to_handle_at: 264,
      lookup_dcookie: 18, open_tree: 428, move_mount: 429, fsopen: 430, fsconfig: 431,
      fsmount: 432, fspick: 433, mount_setattr: 442, quotactl: 60, vhangup: 58, syslog: 116,
      io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    },
  },
};

// Classic BPF opcodes and seccomp return values (linux/filter.h, linux/seccomp.h).
const LOAD_WORD_ABSOLUTE = 0x20;
const JUMP_IF_EQUAL = 0x15;
const JUMP_IF_GREATER_OR_EQUAL = 0x35;
const RETURN = 0x06;
const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_ALLOW = 0x7fff0000;
const EPERM = 1;
const ENOSYS = 38;
const OFFSET_OF_NR = 0;
const OFFSET_OF_ARCH = 4;

/**
 * The filter for `arch` as bytes of `struct sock_filter[]` in host byte order, or
 * undefined when there is no table for that architecture (the sandbox then runs without
 * a filter).
 */
export function seccompFilter(arch: NodeJS.Architecture = process.arch): Buffer | undefined {
  const table = ARCHITECTURES[arch];
  if (table === undefined) return undefined;
  const instructions: Array<[code: number, jumpIfTrue: number, jumpIfFalse: number, operand: number]> = [
    [LOAD_WORD_ABSOLUTE, 0, 0, OFFSET_OF_ARCH],
    [JUMP_IF_EQUAL, 1, 0, table.auditArch],
    // A call made through another architecture's ABI would be numbered differently.
    [RETURN, 0, 0, SECCOMP_RET_KILL_PROCESS],
    [LOAD_WORD_ABSOLUTE, 0, 0, OFFSET_OF_NR],
  ];
  if (table.foreignAbiBase !== undefined) {
    instructions.push([JUMP_IF_GREATER_OR_EQUAL, 0, 1, table.foreignAbiBase], [RETURN, 0, 0, SECCOMP_RET_ERRNO | ENOSYS]);
  }
  const refuse = (names: readonly SyscallName[], errno: number): void => {
    for (const name of names) {
      instructions.push([JUMP_IF_EQUAL, 0, 1, table.numbers[name]], [RETURN, 0, 0, SECCOMP_RET_ERRNO | errno]);
    }
  };
  refuse(REFUSED_WITH_EPERM, EPERM);
  refuse(REFUSED_WITH_ENOSYS, ENOSYS);
  instructions.push([RETURN, 0, 0, SECCOMP_RET_ALLOW]);
  const bytes = Buffer.alloc(instructions.length * 8);
  const littleEndian = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;
  instructions.forEach(([code, jumpIfTrue, jumpIfFalse, operand], index) => {
    const offset = index * 8;
    if (littleEndian) {
      bytes.writeUInt16LE(code, offset);
      bytes.writeUInt32LE(operand >>> 0, offset + 4);
    } else {
      bytes.writeUInt16BE(code, offset);
      bytes.writeUInt32BE(operand >>> 0, offset + 4);
    }
    bytes.writeUInt8(jumpIfTrue, offset + 2);
    bytes.writeUInt8(jumpIfFalse, offset + 3);
  });
  return bytes;
}
