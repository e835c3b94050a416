/* SPDX-License-Identifier: MIT
 * lua_process.c: dlock.process, a module of its own (process.so): the
 * process plumbing of the `dlock` command (bin/dlock): start the command,
 * hear signals and the command's end through one pipe, pass signals on,
 * reap it. It shares only util.c with dlock.core.
 *
 * Only the command calls these. They change process-wide state (signal
 * handlers, the terminal's foreground group), which a library must not do
 * to its host; the command owns its process. The command runs in a process
 * group of its own, which gets the terminal while it runs in the
 * foreground, as a shell does with a job. Signals ignored when dlock
 * started stay ignored, in dlock and in the command (nohup); but SIGCHLD,
 * which dlock needs.
 */
#define _GNU_SOURCE
#include "binding/compat.h"
#include "base/dlock.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

extern char **environ;

/* The signals the command hears (all but KILL and STOP, which it only
 * sends). */
static const struct { const char *name; int sig; } SIGNALS[] = {
    { "HUP", SIGHUP }, { "INT", SIGINT }, { "QUIT", SIGQUIT },
    { "TERM", SIGTERM }, { "USR1", SIGUSR1 }, { "USR2", SIGUSR2 },
    { "ALRM", SIGALRM }, { "WINCH", SIGWINCH }, { "TSTP", SIGTSTP },
    { "CONT", SIGCONT }, { "CHLD", SIGCHLD },
    { "KILL", SIGKILL }, { "STOP", SIGSTOP },
};
#define NSIGNALS (sizeof SIGNALS / sizeof SIGNALS[0])
#define NTRAPPED (NSIGNALS - 2)

/* The self-pipe: a handler writes the signal's number, the command's loop
 * polls the read end. Both ends non-blocking, close-on-exec. `ignored`:
 * the signals ignored at start, left alone. `tty`: the controlling
 * terminal, or -1. */
static int sigpipe[2] = { -1, -1 };
static sigset_t ignored;
static int tty = -1;

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    ssize_t r = write(sigpipe[1], &b, 1);       /* full pipe: already awake */
    (void)r;
    errno = saved;
}

static const char *signame(int sig)
{
    for (size_t i = 0; i < NSIGNALS; i++)
        if (SIGNALS[i].sig == sig)
            return SIGNALS[i].name;
    return "?";
}

static int signum(lua_State *L, int idx)
{
    const char *name = luaL_checkstring(L, idx);
    for (size_t i = 0; i < NSIGNALS; i++)
        if (strcmp(SIGNALS[i].name, name) == 0)
            return SIGNALS[i].sig;
    return luaL_argerror(L, idx, "unknown signal name");
}

static int nonblock_cloexec(int fd)
{
    return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0 ||
           fcntl(fd, F_SETFD, FD_CLOEXEC) < 0 ? -1 : 0;
}

/* process.trap(): from now on the signals of SIGNALS (but those ignored
 * at start) are caught into the pipe. Once per process. */
static int process_trap(lua_State *L)
{
    if (sigpipe[0] >= 0)
        return 0;
    if (pipe(sigpipe) < 0 || nonblock_cloexec(sigpipe[0]) < 0 ||
        nonblock_cloexec(sigpipe[1]) < 0)
        return luaL_error(L, "dlock: pipe: %s", strerror(errno));
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigemptyset(&ignored);
    for (size_t i = 0; i < NTRAPPED; i++) {
        int sig = SIGNALS[i].sig;
        if (sig != SIGCHLD && sigaction(sig, NULL, &old) == 0 && old.sa_handler == SIG_IGN)
            sigaddset(&ignored, sig);
        else
            sigaction(sig, &sa, NULL);
    }
    tty = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    /* dlock writes to the terminal while the command has it: never let
     * that stop dlock (stty tostop) */
    sigset_t ttou;
    sigemptyset(&ttou);
    sigaddset(&ttou, SIGTTOU);
    pthread_sigmask(SIG_BLOCK, &ttou, NULL);
    return 0;
}

/* process.wait(seconds [, fd]) -> { "TERM", "CHLD", ... }: the signals
 * caught since the last call, waiting up to seconds for one (or for fd to
 * turn readable). */
static int process_wait(lua_State *L)
{
    double s = luaL_checknumber(L, 1);
    int fds[2] = { sigpipe[0], (int)luaL_optinteger(L, 2, -1) };
    if (sigpipe[0] < 0)
        return luaL_error(L, "dlock: process.wait before process.trap");
    if (s > 0)
        dl_wait_fds(fds, fds[1] >= 0 ? 2 : 1, dl_now_us() + (int64_t)(s * 1e6));
    lua_newtable(L);
    unsigned char buf[64];
    int n = 0;
    for (ssize_t k; (k = read(sigpipe[0], buf, sizeof buf)) > 0;)
        for (ssize_t i = 0; i < k; i++) {
            lua_pushstring(L, signame(buf[i]));
            lua_rawseti(L, -2, ++n);
        }
    return 1;
}

/* Where execvp would find file: into buf (n bytes). Returns 0, or the
 * errno execvp would fail with (ENOENT: nowhere; EACCES: found, but not
 * executable). Searched here, before the fork: the child only execs. */
static int find_program(const char *file, char *buf, size_t n)
{
    if (strchr(file, '/')) {
        if (strlen(file) >= n)
            return ENAMETOOLONG;
        strcpy(buf, file);
        return 0;
    }
    const char *path = getenv("PATH");
    int found = ENOENT;
    for (const char *p = path ? path : "/bin:/usr/bin"; ; p++) {
        size_t len = strcspn(p, ":");
        struct stat st;
        if (snprintf(buf, n, "%.*s/%s", (int)(len ? len : 1),
                     len ? p : ".", file) < (int)n && stat(buf, &st) == 0 &&
            !S_ISDIR(st.st_mode)) {
            if (access(buf, X_OK) == 0)
                return 0;
            found = EACCES;
        }
        p += len;
        if (!*p)
            break;
    }
    return found;
}

/* The command (table 1) and its environment (the pairs of table 2 over
 * environ, replacing those of the same name) as NULL-terminated arrays,
 * in userdata pushed on the stack; raises on misuse. The strings stay in
 * the tables and in environ. */
static void spawn_args(lua_State *L, const char ***argvp, const char ***envpp)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checktype(L, 2, LUA_TTABLE);
    size_t argc = lua_rawlen(L, 1), envc = lua_rawlen(L, 2), ours = 0;
    if (argc == 0)
        luaL_argerror(L, 1, "no command");
    while (environ[ours])
        ours++;
    const char **argv = lua_newuserdata(L, (argc + 1) * sizeof *argv);
    const char **envp = lua_newuserdata(L, (ours + envc + 1) * sizeof *envp);
    /* Strings only: a number would be converted in a stack slot, and
     * collected once popped (the tables keep strings alive, not those). */
    for (size_t i = 0; i < argc; i++) {
        if (lua_rawgeti(L, 1, (lua_Integer)i + 1) != LUA_TSTRING)
            luaL_argerror(L, 1, "an array of strings expected");
        argv[i] = lua_tostring(L, -1);          /* kept alive by table 1 */
        lua_pop(L, 1);
    }
    argv[argc] = NULL;
    size_t k = 0;
    for (size_t i = 0; i < envc; i++) {
        if (lua_rawgeti(L, 2, (lua_Integer)i + 1) != LUA_TSTRING)
            luaL_argerror(L, 2, "an array of strings expected");
        envp[k++] = lua_tostring(L, -1);        /* kept alive by table 2 */
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < ours; i++) {         /* environ minus overridden */
        size_t n = strcspn(environ[i], "="), j = 0;
        for (; j < envc; j++)
            if (strncmp(envp[j], environ[i], n + 1) == 0)
                break;
        if (j == envc)
            envp[k++] = environ[i];
    }
    envp[k] = NULL;
    *argvp = argv;
    *envpp = envp;
}

/* The child, between fork and exec (async-signal-safe calls only): the
 * signals dlock caught at their defaults, a process group of its own, the
 * death signal, the mask emptied, then path; if the exec fails, its errno
 * goes to the pipe ep. Never returns. */
static void exec_child(const char *path, const char **argv,
                       const char **envp, int ep, pid_t parent)
{
    sigset_t none;
    sigemptyset(&none);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    for (size_t i = 0; i < NTRAPPED; i++)
        if (!sigismember(&ignored, SIGNALS[i].sig))
            sigaction(SIGNALS[i].sig, &sa, NULL);
    setpgid(0, 0);
#ifdef __linux__
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127);                     /* dlock already died */
#else
    (void)parent;
#endif
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(path, (char *const *)argv, (char *const *)envp);
    int e = errno;
    ssize_t w = write(ep, &e, sizeof e);
    (void)w;
    _exit(127);
}

/* Fork and exec path in a process group of its own: 0 and *pid, or the
 * errno of what failed (the exec's too, read from a close-on-exec pipe:
 * that child is reaped). */
static int start(const char *path, const char **argv, const char **envp,
                 pid_t *pid)
{
    int ep[2], err = 0;
    if (pipe(ep) != 0)
        return errno;
    if (nonblock_cloexec(ep[1]) < 0 || fcntl(ep[0], F_SETFD, FD_CLOEXEC) < 0) {
        err = errno;
        close(ep[0]);
        close(ep[1]);
        return err;
    }
    /* No handler of dlock's runs in the child: every signal is blocked
     * across the fork, and the child sets its dispositions before it
     * lets any in. */
    sigset_t all, old;
    sigfillset(&all);
    pid_t parent = getpid();
    pthread_sigmask(SIG_SETMASK, &all, &old);
    *pid = fork();
    if (*pid == 0)
        exec_child(path, argv, envp, ep[1], parent);
    if (*pid < 0)
        err = errno;
    else
        setpgid(*pid, *pid);            /* (as the child does: no race) */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(ep[1]);
    int e;
    ssize_t r;
    while ((r = read(ep[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(ep[0]);
    if (*pid > 0 && r == (ssize_t)sizeof e) {   /* exec failed */
        err = e;
        while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    return err;
}

/* process.spawn(argv, env) -> pid | nil, message, errno name: runs
 * argv[1] (searched in PATH) with argv, in a process group of its own (its
 * pid is the group's id), with the environment plus env's NAME=value pairs
 * (which replace any of the same name), an empty signal mask, and the
 * signals dlock caught at their defaults (those ignored at start stay
 * ignored). On Linux it dies with dlock (SIGKILL when dlock's thread that
 * spawned it ends): a dlock killed by SIGKILL, which cannot release the
 * lock, leaves no command running without it. */
static int process_spawn(lua_State *L)
{
    const char **argv, **envp;
    spawn_args(L, &argv, &envp);
    char path[4096];
    pid_t pid = -1;
    int err = find_program(argv[0], path, sizeof path);
    if (err == 0)
        err = start(path, argv, envp, &pid);
    if (err != 0) {
        lua_pushnil(L);
        lua_pushstring(L, strerror(err));
        lua_pushstring(L, err == ENOENT ? "ENOENT" : "EEXEC");
        return 3;
    }
    lua_pushinteger(L, pid);
    return 1;
}

/* process.reap(pid) -> nil while it runs; "stopped" and the signal's name
 * when a signal stopped it; else its exit status: the status it exited
 * with, or 128 + N when signal N ended it, and the signal's name then. */
static int process_reap(lua_State *L)
{
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    int st;
    pid_t r;
    while ((r = waitpid(pid, &st, WNOHANG | WUNTRACED)) < 0 && errno == EINTR)
        ;
    if (r <= 0)
        return r < 0 ? luaL_error(L, "dlock: waitpid: %s", strerror(errno)) : 0;
    if (WIFSTOPPED(st)) {
        lua_pushliteral(L, "stopped");
        lua_pushstring(L, signame(WSTOPSIG(st)));
        return 2;
    }
    if (WIFSIGNALED(st)) {
        lua_pushinteger(L, 128 + WTERMSIG(st));
        lua_pushstring(L, signame(WTERMSIG(st)));
        return 2;
    }
    lua_pushinteger(L, WEXITSTATUS(st));
    return 1;
}

/* process.kill(pid, name [, to]) -> true, or nil, message: sends the
 * signal (0: none, a probe) to pid; to = "group": to the process group pid
 * leads (or to pid, should the group be gone); "group only": never to pid
 * alone (once pid is reaped, its number may be another process's). */
static int process_kill(lua_State *L)
{
    pid_t pid = (pid_t)luaL_checkinteger(L, 1);
    int sig = lua_isnumber(L, 2) && lua_tointeger(L, 2) == 0 ? 0 : signum(L, 2);
    const char *to = luaL_optstring(L, 3, "pid");
    int group = strcmp(to, "pid") != 0, only = strcmp(to, "group only") == 0;
    if (pid <= 0)
        return luaL_argerror(L, 1, "not a process id");
    if (group && !only && strcmp(to, "group") != 0)
        return luaL_argerror(L, 3, "'pid', 'group' or 'group only'");
    if ((group && kill(-pid, sig) == 0) ||
        (!only && (!group || errno == ESRCH) && kill(pid, sig) == 0)) {
        lua_pushboolean(L, 1);
        return 1;
    }
    lua_pushnil(L);
    lua_pushstring(L, strerror(errno));
    return 2;
}

/* process.stop([group]): stop this process (SIGSTOP), or with group its
 * whole process group, until a SIGCONT. */
static int process_stop(lua_State *L)
{
    kill(lua_toboolean(L, 1) ? 0 : getpid(), SIGSTOP);
    return 0;
}

/* process.foreground() -> whether dlock's process group has its
 * terminal now (false without one). */
static int process_foreground(lua_State *L)
{
    lua_pushboolean(L, tty >= 0 && tcgetpgrp(tty) == getpgrp());
    return 1;
}

/* process.terminal(to, from) -> whether the terminal's foreground group
 * went from group `from` to group `to`: (pid, nil) gives it to the command
 * while dlock's group has it; (nil, pid) takes it back for dlock's group
 * only while the command's group still has it (never from a shell that
 * took it meanwhile). SIGTTOU, which a background group gets for this, is
 * blocked since process.trap. */
static int process_terminal(lua_State *L)
{
    pid_t to = lua_isnoneornil(L, 1) ? getpgrp() : (pid_t)luaL_checkinteger(L, 1);
    pid_t from = lua_isnoneornil(L, 2) ? getpgrp() : (pid_t)luaL_checkinteger(L, 2);
    lua_pushboolean(L, tty >= 0 && tcgetpgrp(tty) == from && tcsetpgrp(tty, to) == 0);
    return 1;
}

/* process.signals() -> { HUP = 1, ... }: the signals heard, by name, with
 * their numbers on this system. */
static int process_signals(lua_State *L)
{
    lua_createtable(L, 0, (int)NTRAPPED);
    for (size_t i = 0; i < NTRAPPED; i++) {
        lua_pushinteger(L, SIGNALS[i].sig);
        lua_setfield(L, -2, SIGNALS[i].name);
    }
    return 1;
}

int luaopen_dlock_process(lua_State *L);

__attribute__((visibility("default")))
int luaopen_dlock_process(lua_State *L)
{
    static const luaL_Reg funcs[] = {
        { "trap", process_trap },
        { "wait", process_wait },
        { "spawn", process_spawn },
        { "reap", process_reap },
        { "kill", process_kill },
        { "signals", process_signals },
        { "stop", process_stop },
        { "foreground", process_foreground },
        { "terminal", process_terminal },
        { NULL, NULL }
    };
    luaL_newlib(L, funcs);    return 1;
}
