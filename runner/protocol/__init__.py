"""Run/1 with no I/O at all: bytes in, events out (in the manner of h11)."""
