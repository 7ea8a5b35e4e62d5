"""Objects of a pack's own classes passed between two of its nodes, as Impact Pack's SEGS and
packs' PIPE objects are (test_idioms_held_objects.py): only the pack's environment can unpickle
them, so isolated they stay in its worker, and a node outside it cannot read them."""

from .pipe_types import Pipe, Seg


class MakePipe:
    """A PIPE holding the image, and SEGS of its two halves."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("IDIOM_PIPE", "IDIOM_SEGS")
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "label": ("STRING", {"default": "pipe"})}}

    def make(self, image, label):
        height, width = image.shape[1], image.shape[2]
        segs = ((height, width), [Seg("left", (0, 0, width // 2, height)),
                                  Seg("right", (width // 2, 0, width, height))])
        return (Pipe(label, image, segs), segs)


class ReadPipe:
    """What the PIPE and the SEGS hold, and whether they are still of the pack's own classes
    (the very classes, not copies of them)."""
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("STRING",)
    OUTPUT_NODE = True
    FUNCTION = "read"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"pipe": ("IDIOM_PIPE",), "segs": ("IDIOM_SEGS",)}}

    def read(self, pipe, segs):
        own = isinstance(pipe, Pipe) and all(isinstance(seg, Seg) for seg in segs[1])
        text = "%s: image %s, mean %.4f; segs %s: %s; own classes: %s" % (
            pipe.label, list(pipe.image.shape), float(pipe.image.mean()), list(segs[0]),
            ", ".join("%s%s" % (seg.label, list(seg.box)) for seg in segs[1]), own)
        return {"ui": {"text": [text]}, "result": (text,)}


NODE_CLASS_MAPPINGS = {"MakePipeIdiomIsohost": MakePipe, "ReadPipeIdiomIsohost": ReadPipe}
NODE_DISPLAY_NAME_MAPPINGS = {"MakePipeIdiomIsohost": "Make pipe (idioms)",
                              "ReadPipeIdiomIsohost": "Read pipe (idioms)"}
