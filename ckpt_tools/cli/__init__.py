"""The `ckpt` command line: thin wrappers that parse options, call the library and print."""
