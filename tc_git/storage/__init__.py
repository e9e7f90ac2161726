"""Storage: the private repository and everything that writes or reads its objects and packs
(store discovery and ownership, pack writers, bundles, handles kept between calls, the native
libgit2 paths). Nothing here knows about workspaces' contents or tasks.

No imports here: importing a module of this package must not load the others."""
