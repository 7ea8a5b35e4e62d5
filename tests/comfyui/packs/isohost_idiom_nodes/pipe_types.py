"""The classes of the objects that held_objects.py's nodes pass between them, in a module of
the pack's own, where packs keep theirs: Impact Pack's SEG is a namedtuple of its impact.core,
and many packs' PIPE a plain class of their utils module."""

from collections import namedtuple

# Impact Pack's SEG, shortened: SEGS are ((height, width), [SEG, ...]).
Seg = namedtuple("Seg", ["label", "box"])


class Pipe:
    """A pack's PIPE: a plain object holding what the next node of the pack needs."""

    def __init__(self, label, image, segs):
        self.label, self.image, self.segs = label, image, segs
