"""Cost handlers: one pure function per op, one registration line each."""
