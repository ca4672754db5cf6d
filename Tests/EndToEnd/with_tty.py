"""Runs a command with a controlling terminal (a new pseudo-terminal), as drowsed has when an
operator starts it by hand in a terminal: `python3 with_tty.py CMD ARGS...`. The caller has
made this process a session leader (start_new_session); the pty's master stays open in the
command, so the terminal does not hang up."""

import fcntl
import os
import sys
import termios

master, slave = os.openpty()
os.set_inheritable(master, True)
fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
os.dup2(slave, 0)
os.close(slave)
os.execvp(sys.argv[1], sys.argv[1:])
