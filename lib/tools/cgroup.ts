import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

/** Name prefix of the cgroups this process makes, one per sandbox worker. */
export const OWN_CGROUP_PREFIX = `tirl-sandbox-${process.pid}-`;

/**
 * A memory cgroup holding one sandbox worker, so that all the processes of a run and the
 * files they keep in memory (tmpfs pages are charged to the cgroup) share one limit,
 * which per-process rlimits cannot give. Created under this process's own cgroup, in the
 * cgroup v1 memory hierarchy, or in cgroup v2 where the memory controller is delegated.
 * @internal
 */
export class MemoryCgroup {
  readonly path: string;
  readonly #version: 1 | 2;

  private constructor(path: string, version: 1 | 2) {
    this.path = path;
    this.#version = version;
  }

  /**
   * Creates a cgroup named `name` limited to `limitBytes` of memory (and no swap), or
   * returns undefined where that is not possible: not root, no writable memory hierarchy,
   * or the memory controller not delegated (cgroup v2).
   */
  static create(name: string, limitBytes: number): MemoryCgroup | undefined {
    if (typeof process.getuid !== 'function' || process.getuid() !== 0) return undefined;
    const location = findOwnMemoryCgroup();
    if (location === undefined) return undefined;
    const path = join(location.path, name);
    try {
      mkdirSync(path);
    } catch {
      return undefined;
    }
    const cgroup = new MemoryCgroup(path, location.version);
    try {
      if (location.version === 1) {
        writeFileSync(join(path, 'memory.limit_in_bytes'), String(limitBytes));
        const withSwap = join(path, 'memory.memsw.limit_in_bytes');
        if (existsSync(withSwap)) writeFileSync(withSwap, String(limitBytes));
      } else {
        writeFileSync(join(path, 'memory.max'), String(limitBytes));
        const swap = join(path, 'memory.swap.max');
        if (existsSync(swap)) writeFileSync(swap, '0');
      }
    } catch {
      cgroup.#removeNow();
      return undefined;
    }
    return cgroup;
  }

  /** Moves process `pid` into the cgroup; its later children are born there. */
  addProcess(pid: number): void {
    writeFileSync(join(this.path, 'cgroup.procs'), String(pid));
  }

  /** How many times the kernel's OOM killer has killed a process of this cgroup. */
  oomKills(): number {
    const file = this.#version === 1 ? 'memory.oom_control' : 'memory.events';
    try {
      const match = /^oom_kill (\d+)$/m.exec(readFileSync(join(this.path, file), 'utf8'));
      return match === null ? 0 : Number(match[1]);
    } catch {
      return 0;
    }
  }

  /** Removes the cgroup once its processes are gone (retrying for up to a second). */
  async remove(): Promise<void> {
    for (let attempt = 0; attempt < 50; attempt += 1) {
      if (this.#removeNow()) return;
      await sleep(20);
    }
  }

  #removeNow(): boolean {
    try {
      rmdirSync(this.path);
      return true;
    } catch (error) {
      return (error as NodeJS.ErrnoException).code === 'ENOENT';
    }
  }
}

export interface CgroupLocation {
  version: 1 | 2;
  path: string;
}

/** Directory of this process's memory cgroup, from /proc/self/cgroup and mountinfo. */
export function findOwnMemoryCgroup(): CgroupLocation | undefined {
  let membership: string;
  let mounts: string;
  try {
    membership = readFileSync('/proc/self/cgroup', 'utf8');
    mounts = readFileSync('/proc/self/mountinfo', 'utf8');
  } catch {
    return undefined;
  }
  const mountLines = mounts.split('\n').map((line) => {
    const [before, after] = line.split(' - ');
    const fields = (before ?? '').split(' ');
    const [fsType, , superOptions] = (after ?? '').split(' ');
    return { root: fields[3] ?? '', mountPoint: fields[4] ?? '', fsType, superOptions: (superOptions ?? '').split(',') };
  });
  const within = (root: string, mountPoint: string, cgroupPath: string): string | undefined => {
    if (root === '/') return join(mountPoint, cgroupPath);
    return cgroupPath === root || cgroupPath.startsWith(`${root}/`) ? join(mountPoint, cgroupPath.slice(root.length)) : undefined;
  };
  for (const line of membership.split('\n')) {
    const [, controllers, cgroupPath] = line.split(':');
    if (controllers === undefined || cgroupPath === undefined) continue;
    if (controllers.split(',').includes('memory')) {
      const mount = mountLines.find((entry) => entry.fsType === 'cgroup' && entry.superOptions.includes('memory'));
      const path = mount && within(mount.root, mount.mountPoint, cgroupPath);
      if (path !== undefined) return { version: 1, path };
    }
  }
  const unified = membership.split('\n').find((line) => line.startsWith('0::'));
  const mount = mountLines.find((entry) => entry.fsType === 'cgroup2');
  if (unified === undefined || mount === undefined) return undefined;
  const path = within(mount.root, mount.mountPoint, unified.slice(3));
  if (path === undefined) return undefined;
  try {
    // The controller must be enabled for children of our cgroup (delegated).
    if (!readFileSync(join(path, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('memory')) return undefined;
  } catch {
    return undefined;
  }
  return { version: 2, path };
}
