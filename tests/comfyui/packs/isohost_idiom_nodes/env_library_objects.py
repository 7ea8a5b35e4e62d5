"""Objects of a library that the pack's environment alone has (packs/env_library), passed
between two of the pack's nodes as a face-swap pack passes insightface's (test_idioms_held_
objects.py): isolated, they stay in the worker; in process the library is missing, and the pack
registers these nodes only where it imports."""

try:
    import isohost_env_library
except ImportError:  # ComfyUI's own interpreter, in process
    isohost_env_library = None


class MakeDetector:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("IDIOM_DETECTOR",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"label": ("STRING", {"default": "detector"})}}

    def make(self, label):
        return (isohost_env_library.Detector(label),)


class UseDetector:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("STRING",)
    OUTPUT_NODE = True
    FUNCTION = "use"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"detector": ("IDIOM_DETECTOR",)}}

    def use(self, detector):
        text = "%s of %s" % (detector.label, type(detector).__module__)
        return {"ui": {"text": [text]}, "result": (text,)}


NODE_CLASS_MAPPINGS = {}
if isohost_env_library is not None:
    NODE_CLASS_MAPPINGS = {"MakeDetectorIdiomIsohost": MakeDetector,
                           "UseDetectorIdiomIsohost": UseDetector}
