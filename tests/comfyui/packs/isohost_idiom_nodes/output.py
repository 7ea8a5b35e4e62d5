"""A node that prints and logs, as packs do to say what they are doing (test_idioms_output.py):
ComfyUI's log (/internal/logs, the front end's log panel) shows both lines, isolated or not."""

import logging

_log = logging.getLogger(__name__)


class PrintAndLog:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "say"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"marker": ("STRING", {"default": ""})}}

    def say(self, marker):
        print("isohost-idiom print %s" % marker)
        _log.info("isohost-idiom logging %s", marker)
        return {}


NODE_CLASS_MAPPINGS = {"PrintAndLogIdiomIsohost": PrintAndLog}
