/**
 * Source of the supervisor that runs as PID 1 inside each sandbox worker (Debian's
 * `/usr/bin/python3`, started by bubblewrap). It is passed with `python3 -c`, so no file
 * of the project needs to be visible inside the sandbox.
 *
 * Protocol on the supervisor's stdin/stdout: frames of a 4-byte big-endian length followed
 * by that many bytes of UTF-8 JSON. The supervisor first writes `{"ready": true}`; then for
 * each request `{"code": string}` it forks a child with the run's limits, collects what the
 * child prints, ends every process left in the sandbox, empties the writable directories,
 * and answers `{"outcome", "exitCode", "signal", "stdout", "stderr", "durationMs"}` where
 * outcome is 'exited' | 'signaled' | 'timeout' | 'output-limit'.
 *
 * Why PID 1: the kernel drops signals sent from inside a PID namespace to its init unless
 * init installed a handler, so sandboxed code cannot kill (or stop) its supervisor, and
 * orphans are re-parented to the supervisor, which reaps them all after every run.
 * @internal
 */
export const SUPERVISOR_SOURCE = String.raw`
import atexit, ctypes, json, linecache, os, resource, select, signal, sys, threading, time, traceback, types

CONFIG = json.loads(sys.argv[1])
PR_SET_DUMPABLE = 4
LIBC = ctypes.CDLL(None, use_errno=True)

# Keep the protocol pipes on private descriptors; fds 0 and 1 become /dev/null.
PROTOCOL_IN = os.dup(0)
PROTOCOL_OUT = os.dup(1)
_null = os.open('/dev/null', os.O_RDWR)
os.dup2(_null, 0)
os.dup2(_null, 1)
os.close(_null)

# Python installs a SIGINT handler; as PID 1 a handled signal could be sent by sandboxed code.
signal.signal(signal.SIGINT, signal.SIG_DFL)
# Not dumpable: processes of the same uid cannot ptrace the supervisor or open /proc/1/fd.
LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

# A program may change the modes of its writable directories; each run starts with these.
WRITABLE_DIR_MODES = {path: os.stat(path).st_mode & 0o7777 for path in CONFIG['writableDirs']}

for _module in CONFIG['preloadModules']:
    __import__(_module)


def read_exact(count):
    chunks = []
    while count > 0:
        chunk = os.read(PROTOCOL_IN, count)
        if not chunk:
            sys.exit(0)  # the host closed the pipe: shut down
        chunks.append(chunk)
        count -= len(chunk)
    return b''.join(chunks)


def read_frame():
    length = int.from_bytes(read_exact(4), 'big')
    return json.loads(read_exact(length).decode('utf-8'))


def write_frame(message):
    data = json.dumps(message).encode('utf-8')
    view = memoryview(len(data).to_bytes(4, 'big') + data)
    while view:
        written = os.write(PROTOCOL_OUT, view)
        view = view[written:]


def set_limit(kind, value):
    resource.setrlimit(kind, (value, value))


def apply_limits():
    memory = CONFIG['memoryBytes']
    set_limit(resource.RLIMIT_DATA, memory)
    set_limit(resource.RLIMIT_AS, memory + CONFIG['addressSpaceSlackBytes'])
    # SIGXCPU at the soft limit (reported as a timeout), SIGKILL one second later.
    resource.setrlimit(resource.RLIMIT_CPU, (CONFIG['cpuSeconds'], CONFIG['cpuSeconds'] + 1))
    set_limit(resource.RLIMIT_NPROC, CONFIG['maxProcesses'])
    set_limit(resource.RLIMIT_FSIZE, CONFIG['maxFileBytes'])
    set_limit(resource.RLIMIT_NOFILE, CONFIG['maxOpenFiles'])
    set_limit(resource.RLIMIT_CORE, 0)
    set_limit(resource.RLIMIT_MEMLOCK, 0)
    set_limit(resource.RLIMIT_MSGQUEUE, 0)


def exit_status_of(error):
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def run_python(source):
    sys.stdout = open(1, 'w', encoding='utf-8', errors='backslashreplace', closefd=False, buffering=1)
    sys.stderr = open(2, 'w', encoding='utf-8', errors='backslashreplace', closefd=False, buffering=1)
    sys.stdin = open(0, 'r', encoding='utf-8', closefd=False)
    sys.argv = ['']
    # As for 'python3 main.py' run in the working directory: its modules are importable.
    sys.path.insert(0, CONFIG['workdir'])
    filename = '<code>'
    # Registering the source lets tracebacks show the offending lines.
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    main = types.ModuleType('__main__')
    sys.modules['__main__'] = main
    status = 0
    try:
        exec(compile(source, filename, 'exec'), main.__dict__)
    except SystemExit as error:
        status = exit_status_of(error)
    except BaseException as error:
        # Drop this function's own frame so the traceback starts in the program.
        traceback.print_exception(type(error), error, error.__traceback__.tb_next)
        status = 1
    try:
        # What interpreter shutdown does: wait for non-daemon threads, run atexit hooks.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 1
    os._exit(status)


def run_executable(source):
    with open(CONFIG['codePath'], 'w', encoding='utf-8') as code_file:
        code_file.write(source)
    # Python ignores these; an exec'd program expects the defaults.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    argv = CONFIG['command'] + [CONFIG['codePath']]
    os.execv(argv[0], argv)


def child_main(source, stdout_write, stderr_write):
    try:
        os.dup2(stdout_write, 1)
        os.dup2(stderr_write, 2)
        os.closerange(3, 1 << 20)  # the protocol pipes among them
        os.chdir(CONFIG['workdir'])
        os.setsid()
        os.nice(CONFIG['niceness'])
        apply_limits()
        LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        if CONFIG['language'] == 'python':
            run_python(source)
        else:
            run_executable(source)
    except BaseException:
        try:
            traceback.print_exc()
        finally:
            os._exit(125)
    os._exit(125)


def end_every_other_process():
    # kill(-1) from PID 1 reaches every process of the namespace but init; repeat until
    # no child is left, so a process forked during the sweep is caught by the next one.
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def remove_files_here():
    # Unlinks every entry of the working directory but its subdirectories; returns their names.
    with os.scandir('.') as scan:
        entries = [(entry.name, entry.is_dir(follow_symlinks=False)) for entry in scan]
    for name, is_directory in entries:
        if not is_directory:
            os.unlink(name)
    return [name for name, is_directory in entries if is_directory]


def empty_directory(path):
    # Depth first without recursion, by names relative to the working directory: a program
    # may have built a tree deeper than Python's recursion limit or than PATH_MAX.
    os.chdir(path)
    stack = [(None, remove_files_here())]
    while stack:
        name, pending = stack[-1]
        if pending:
            child = pending.pop()
            os.chmod(child, 0o700)  # a program may have removed its own permissions
            os.chdir(child)
            stack.append((child, remove_files_here()))
        else:
            stack.pop()
            if name is not None:
                os.chdir('..')
                os.rmdir(name)
    os.chdir('/')


def signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:  # real-time signals have no name
        return 'SIG' + str(number)


def run(source):
    started = time.monotonic()
    deadline = started + CONFIG['timeoutMs'] / 1000.0
    stdout_read, stdout_write = os.pipe()
    stderr_read, stderr_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        child_main(source, stdout_write, stderr_write)
    os.close(stdout_write)
    os.close(stderr_write)
    child_exit = os.pidfd_open(pid)
    captured = {stdout_read: bytearray(), stderr_read: bytearray()}
    open_pipes = [stdout_read, stderr_read]
    budget = CONFIG['maxOutputBytes']
    wait_status = None
    outcome = None
    while outcome is None and (open_pipes or wait_status is None):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            outcome = 'timeout'
            break
        watched = open_pipes + ([child_exit] if wait_status is None else [])
        readable, _, _ = select.select(watched, [], [], remaining)
        for fd in readable:
            if fd == child_exit:
                _, wait_status = os.waitpid(pid, 0)
                # Background processes may still hold the pipes open: end them now.
                end_every_other_process()
                continue
            data = os.read(fd, 65536)
            if not data:
                open_pipes.remove(fd)
                continue
            if len(data) > budget:
                captured[fd] += data[:budget]
                outcome = 'output-limit'
                break
            captured[fd] += data
            budget -= len(data)
    if wait_status is None:
        os.kill(pid, signal.SIGKILL)
    end_every_other_process()
    os.close(child_exit)
    os.close(stdout_read)
    os.close(stderr_read)
    for path, mode in WRITABLE_DIR_MODES.items():
        os.chmod(path, mode)
        empty_directory(path)
    reply = {
        'outcome': outcome,
        'exitCode': None,
        'signal': None,
        'stdout': captured[stdout_read].decode('utf-8', 'replace'),
        'stderr': captured[stderr_read].decode('utf-8', 'replace'),
        'durationMs': (time.monotonic() - started) * 1000.0,
    }
    if outcome is None and wait_status is not None:
        if os.WIFSIGNALED(wait_status):
            reply['outcome'] = 'signaled'
            reply['signal'] = signal_name(os.WTERMSIG(wait_status))
        else:
            reply['outcome'] = 'exited'
            reply['exitCode'] = os.WEXITSTATUS(wait_status)
    return reply


write_frame({'ready': True})
while True:
    request = read_frame()
    write_frame(run(request['code']))
`;
