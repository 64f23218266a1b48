"""What a path names, as the C++ side says it (trellis/Common/FileKind.h):
the phrase a refusal to read it uses."""

import stat

_KINDS = [(stat.S_ISDIR, "is a directory"),
          (stat.S_ISCHR, "is a character device"),
          (stat.S_ISBLK, "is a block device"),
          (stat.S_ISFIFO, "is a FIFO"), (stat.S_ISSOCK, "is a socket")]


def kind_phrase(mode: int) -> str:
    """"" for a regular file's `st_mode`, else what it is instead ("is a
    FIFO")."""
    if stat.S_ISREG(mode):
        return ""
    return next((text for test, text in _KINDS if test(mode)),
                "is not a regular file")
