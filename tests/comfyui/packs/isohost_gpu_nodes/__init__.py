"""The GPU test nodes as an isolated pack loads them (names end in "Isolated")."""

from .gpu_nodes import mappings

NODE_CLASS_MAPPINGS = mappings("Isolated")
