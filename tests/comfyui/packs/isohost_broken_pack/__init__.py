"""A pack that fails to import: the others must load regardless."""

raise ImportError("isohost_broken_pack needs a module this environment lacks")
