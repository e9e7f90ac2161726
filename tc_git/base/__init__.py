"""Base: errors, reference names, validation, JSON and file-system idioms, result shapes. Standard
library only; every layer may use it.

No imports here: importing a module of this package must not load the others."""
