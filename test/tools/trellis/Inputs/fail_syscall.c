// A fault injector for tests, loaded with LD_PRELOAD: the C library calls
// named by TRELLIS_FAIL fail as a full disk, a broken device or an
// exhausted system would make them fail, so that each error path of the
// real program runs.
//
//   TRELLIS_FAIL=CALL        every call of CALL fails
//   TRELLIS_FAIL=CALL@TEXT   only calls on a path containing TEXT (for
//                            write and fsync: the path of their descriptor;
//                            for rename and renameat2: the source; for
//                            rename-to: rename's destination)
//   TRELLIS_FAIL=CALL@TEXT$  only calls on a path ending with TEXT
//   TRELLIS_FAIL=A,B@TEXT    several such entries
//   TRELLIS_FAIL_TIMES=N     only the first N matching calls fail
//
// CALL is one of mkdir, mkdtemp, rename, rename-to, renameat2, fsync, write,
// open, access, pipe2, fork, getentropy, posix_spawn, mmap (of a file: TEXT
// matches its path), pread (TEXT: its descriptor's path), aligned_alloc
// (TEXT: the
// least size, in bytes, that fails). Failing calls set errno to EIO
// (ENOSPC for write, ENOMEM and EAGAIN where those are what the call
// reports).
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int matches(const char *name, const char *path);

/// Whether the call `name` on `path` (may be null) is to fail.
static int shouldFail(const char *name, const char *path) {
  static long failed = 0;
  const char *times = getenv("TRELLIS_FAIL_TIMES");
  if (!matches(name, path))
    return 0;
  if (times && failed >= strtol(times, NULL, 10))
    return 0;
  ++failed;
  return 1;
}

/// Whether TRELLIS_FAIL names the call `name` on `path`.
static int matches(const char *name, const char *path) {
  const char *spec = getenv("TRELLIS_FAIL");
  size_t length = strlen(name);
  while (spec && *spec) {
    const char *end = strchr(spec, ',');
    size_t entry = end ? (size_t)(end - spec) : strlen(spec);
    if (entry >= length && strncmp(spec, name, length) == 0) {
      if (entry == length)
        return 1;
      if (spec[length] == '@' && path) {
        char text[4096];
        size_t textLength = entry - length - 1;
        if (textLength >= sizeof(text))
          textLength = sizeof(text) - 1;
        memcpy(text, spec + length + 1, textLength);
        text[textLength] = '\0';
        size_t pathLength = strlen(path);
        if (textLength > 0 && text[textLength - 1] == '$') {
          text[--textLength] = '\0';
          if (pathLength >= textLength &&
              strcmp(path + pathLength - textLength, text) == 0)
            return 1;
        } else if (strstr(path, text)) {
          return 1;
        }
      }
    }
    spec = end ? end + 1 : NULL;
  }
  return 0;
}

/// The path of descriptor `fd` (empty when unknown).
static const char *pathOf(int fd, char *buffer, size_t size) {
  char link[64];
  snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  ssize_t got = readlink(link, buffer, size - 1);
  buffer[got > 0 ? got : 0] = '\0';
  return buffer;
}

#define NEXT(type, name) ((type)dlsym(RTLD_NEXT, name))

int mkdir(const char *path, mode_t mode) {
  if (shouldFail("mkdir", path))
    return errno = EIO, -1;
  return NEXT(int (*)(const char *, mode_t), "mkdir")(path, mode);
}

char *mkdtemp(char *pattern) {
  if (shouldFail("mkdtemp", pattern))
    return errno = EIO, (char *)NULL;
  return NEXT(char *(*)(char *), "mkdtemp")(pattern);
}

int rename(const char *from, const char *to) {
  if (shouldFail("rename", from) || shouldFail("rename-to", to))
    return errno = EIO, -1;
  return NEXT(int (*)(const char *, const char *), "rename")(from, to);
}

int renameat2(int fromDir, const char *from, int toDir, const char *to,
              unsigned flags) {
  if (shouldFail("renameat2", from))
    return errno = EIO, -1;
  return NEXT(int (*)(int, const char *, int, const char *, unsigned),
              "renameat2")(fromDir, from, toDir, to, flags);
}

int fsync(int fd) {
  char path[4096];
  if (shouldFail("fsync", pathOf(fd, path, sizeof(path))))
    return errno = EIO, -1;
  return NEXT(int (*)(int), "fsync")(fd);
}

ssize_t write(int fd, const void *data, size_t size) {
  char path[4096];
  if (getenv("TRELLIS_FAIL") && shouldFail("write", pathOf(fd, path, sizeof(path))))
    return errno = ENOSPC, -1;
  return NEXT(ssize_t (*)(int, const void *, size_t), "write")(fd, data, size);
}

void *mmap(void *address, size_t length, int protection, int flags, int fd,
           off_t offset) {
  char path[4096];
  // Anonymous maps (the allocator's) pass untouched.
  if (fd >= 0 && getenv("TRELLIS_FAIL") &&
      shouldFail("mmap", pathOf(fd, path, sizeof(path))))
    return errno = ENOMEM, MAP_FAILED;
  return NEXT(void *(*)(void *, size_t, int, int, int, off_t),
              "mmap")(address, length, protection, flags, fd, offset);
}

ssize_t pread(int fd, void *data, size_t size, off_t offset) {
  char path[4096];
  if (getenv("TRELLIS_FAIL") &&
      shouldFail("pread", pathOf(fd, path, sizeof(path))))
    return errno = EIO, -1;
  return NEXT(ssize_t(*)(int, void *, size_t, off_t), "pread")(fd, data, size,
                                                               offset);
}

ssize_t pread64(int fd, void *data, size_t size, off_t offset) {
  return pread(fd, data, size, offset);
}

ssize_t writev(int fd, const struct iovec *parts, int count) {
  char path[4096];
  if (getenv("TRELLIS_FAIL") && shouldFail("write", pathOf(fd, path, sizeof(path))))
    return errno = ENOSPC, -1;
  return NEXT(ssize_t (*)(int, const struct iovec *, int), "writev")(fd, parts,
                                                                     count);
}

int open(const char *path, int flags, ...) {
  mode_t mode = 0;
  if (flags & (O_CREAT | O_TMPFILE)) {
    va_list arguments;
    va_start(arguments, flags);
    mode = va_arg(arguments, mode_t);
    va_end(arguments);
  }
  if (shouldFail("open", path))
    return errno = EIO, -1;
  return NEXT(int (*)(const char *, int, ...), "open")(path, flags, mode);
}

int access(const char *path, int mode) {
  if (shouldFail("access", path))
    return errno = EACCES, -1;
  return NEXT(int (*)(const char *, int), "access")(path, mode);
}

int pipe2(int fds[2], int flags) {
  if (shouldFail("pipe2", NULL))
    return errno = EMFILE, -1;
  return NEXT(int (*)(int *, int), "pipe2")(fds, flags);
}

pid_t fork(void) {
  if (shouldFail("fork", NULL))
    return errno = EAGAIN, -1;
  return NEXT(pid_t (*)(void), "fork")();
}

int getentropy(void *buffer, size_t size) {
  if (shouldFail("getentropy", NULL))
    return errno = EIO, -1;
  return NEXT(int (*)(void *, size_t), "getentropy")(buffer, size);
}

int posix_spawn(pid_t *pid, const char *path,
                const posix_spawn_file_actions_t *actions,
                const posix_spawnattr_t *attributes, char *const argv[],
                char *const envp[]) {
  if (shouldFail("posix_spawn", path))
    return EAGAIN;
  return NEXT(int (*)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                      const posix_spawnattr_t *, char *const[], char *const[]),
              "posix_spawn")(pid, path, actions, attributes, argv, envp);
}

void *aligned_alloc(size_t alignment, size_t size) {
  const char *spec = getenv("TRELLIS_FAIL");
  const char *entry = spec ? strstr(spec, "aligned_alloc@") : NULL;
  if (entry && size >= strtoull(entry + 14, NULL, 10))
    return errno = ENOMEM, (void *)NULL;
  return NEXT(void *(*)(size_t, size_t), "aligned_alloc")(alignment, size);
}
