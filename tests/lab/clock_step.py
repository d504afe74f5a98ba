"""Steps this machine's CLOCK_REALTIME by a whole number of seconds, atomically.

Reading the clock and then setting it loses whatever time passes between the two calls (tens of
milliseconds in a loaded emulator), so the step is made by the kernel in one call:
clock_adjtime(CLOCK_REALTIME) with ADJ_SETOFFSET | ADJ_NANO.
"""
import ctypes
import os
import sys

ADJ_SETOFFSET = 0x0100
ADJ_NANO = 0x2000
CLOCK_REALTIME = 0


class Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class Timex(ctypes.Structure):
    """struct timex from <linux/timex.h> (208 bytes on x86_64)."""
    _fields_ = [("modes", ctypes.c_uint), ("offset", ctypes.c_long), ("freq", ctypes.c_long),
                ("maxerror", ctypes.c_long), ("esterror", ctypes.c_long), ("status", ctypes.c_int),
                ("constant", ctypes.c_long), ("precision", ctypes.c_long), ("tolerance", ctypes.c_long),
                ("time", Timeval), ("tick", ctypes.c_long), ("ppsfreq", ctypes.c_long),
                ("jitter", ctypes.c_long), ("shift", ctypes.c_int), ("stabil", ctypes.c_long),
                ("jitcnt", ctypes.c_long), ("calcnt", ctypes.c_long), ("errcnt", ctypes.c_long),
                ("stbcnt", ctypes.c_long), ("tai", ctypes.c_int), ("pad", ctypes.c_int * 11)]


def main():
    seconds = int(sys.argv[1])
    libc = ctypes.CDLL(None, use_errno=True)
    tx = Timex(modes=ADJ_SETOFFSET | ADJ_NANO, time=Timeval(seconds, 0))
    if libc.clock_adjtime(CLOCK_REALTIME, ctypes.byref(tx)) < 0:
        err = ctypes.get_errno()
        sys.exit(f"clock_step: clock_adjtime(ADJ_SETOFFSET) failed: {os.strerror(err)}")


if __name__ == "__main__":
    main()
