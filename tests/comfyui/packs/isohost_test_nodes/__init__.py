"""Nodes that exercise isohost's ComfyUI adapter: progress, interrupts, state on self,
IS_CHANGED and VALIDATE_INPUTS, errors, a crash, a model output, and the idioms of popular
packs (a wildcard type, inputs of any name, expansion into other nodes, a seed written into the
prompt). Written for these tests; each reports through its UI output (the prompt's history)."""

import os
import sys
import time

import comfy.utils


def always():
    """What IS_CHANGED returns to run a node in every prompt: a new NaN, never equal to the last
    one. (One NaN object kept in a constant would compare equal to itself in ComfyUI's cache
    keys, so in process the node would be cached.)"""
    return float("nan")


def _ui(**values):
    return {"ui": {key: [value] for key, value in values.items()}, "result": ()}


class Report:
    """Which process and packages ran it."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "report"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"tag": ("STRING", {"default": "x"})},
                "hidden": {"unique_id": "UNIQUE_ID"}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def report(self, tag, unique_id):
        import numpy
        from server import PromptServer

        server = PromptServer.instance
        return _ui(pid=os.getpid(), numpy=numpy.__version__, executable=sys.executable,
                   unique_id=str(unique_id), tag=tag,
                   omp_wait_policy=os.environ.get("OMP_WAIT_POLICY", ""),
                   client_id=server.client_id, last_prompt_id=server.last_prompt_id,
                   last_node_id=server.last_node_id)


class ProgressLoop:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "loop"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"steps": ("INT", {"default": 5, "min": 1, "max": 100000}),
                             "seconds_per_step": ("FLOAT", {"default": 0.0, "min": 0.0})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def loop(self, steps, seconds_per_step):
        bar = comfy.utils.ProgressBar(steps)
        for _ in range(steps):
            if seconds_per_step:
                time.sleep(seconds_per_step)
            bar.update(1)
        return _ui(steps=steps)


class BusyLoop:
    """Spins in Python without a progress tick, until interrupted (or `seconds`)."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "spin"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seconds": ("FLOAT", {"default": 30.0})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def spin(self, seconds):
        from server import PromptServer
        PromptServer.instance.send_sync("isohost_test.started", {"pid": os.getpid()})
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pass
        return _ui(finished=True)


class PollingThread:
    """Works in a thread of its own that polls ComfyUI's interrupt flag, as packs that run work
    beside the node's thread do; the node's thread waits for it in C (join), where no raised
    exception reaches it. Stops when the flag is set."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("STRING",)
    FUNCTION = "spin"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seconds": ("FLOAT", {"default": 30.0})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def spin(self, seconds):
        import threading

        import comfy.model_management
        from server import PromptServer

        stopped = []

        def work():
            deadline = time.monotonic() + seconds
            told = False
            while time.monotonic() < deadline:
                if comfy.model_management.processing_interrupted():
                    stopped.append(True)
                    return
                if not told:  # polling now: the test's interrupt may come
                    told = True
                    PromptServer.instance.send_sync("isohost_test.started", {"pid": os.getpid()})
                time.sleep(0.001)

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()
        return ("stopped" if stopped else "finished",)


class StuckInC:
    """Blocks in one C call that no Python-level interrupt reaches."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "block"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seconds": ("INT", {"default": 60})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def block(self, seconds):
        import ctypes
        from server import PromptServer
        sleep_in_c = ctypes.CDLL(None).sleep
        told = False
        while True:
            try:
                if not told:
                    told = True
                    PromptServer.instance.send_sync("isohost_test.started", {"pid": os.getpid()})
                sleep_in_c(seconds)
                return _ui(finished=True)
            except BaseException:  # an interrupt that beat the C call: back into C
                continue


class Counter:
    """Keeps state on self, as ComfyUI's node objects may."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "count"

    def __init__(self):
        self.total = 0

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"step": ("INT", {"default": 1})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    @classmethod
    def VALIDATE_INPUTS(cls, step):
        return True if step > 0 else "step must be positive, got %d" % step

    def count(self, step):
        self.total += step
        return _ui(count=self.total)


class Raises:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "fail"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"message": ("STRING", {"default": "bad tile size"})}}

    def fail(self, message):
        raise ValueError(message)


class KillSelf:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "die"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def die(self):
        os.kill(os.getpid(), 9)


class MakeModel:
    """Returns a model (an nn.Module), which must not cross silently."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def make(self):
        import torch
        return (torch.nn.Linear(4, 4),)


class MakeHolder:
    """Returns an object that holds a model, as an upscale model's descriptor does; pickling
    would copy the model inside it, so it must not cross either."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("UPSCALE_MODEL",)
    OUTPUT_NODE = True
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    def make(self):
        import types

        import torch
        return (types.SimpleNamespace(scale=4, model=torch.nn.Conv2d(3, 3, 1)),)


class CheckpointName:
    """A loader's input: the files of the checkpoints folder, after "None", listed each time
    ComfyUI asks for INPUT_TYPES; reports the full path the worker finds for the chosen one."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "find"

    @classmethod
    def INPUT_TYPES(cls):
        import folder_paths
        return {"required": {
            "ckpt_name": (["None"] + folder_paths.get_filename_list("checkpoints"),)}}

    def find(self, ckpt_name):
        import folder_paths
        return _ui(path=folder_paths.get_full_path("checkpoints", ckpt_name) or "")


class UseModel:
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "use"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    def use(self, model):
        return _ui(used=True)


class Invert:
    """IMAGE in, IMAGE out."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "invert"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def invert(self, image):
        return (1.0 - image,)


class ThroughModel:
    """IMAGE in, the IMAGE through a small model kept on self (its parameters require grad, as
    any nn.Module's do: an upscaler's, a segmenter's) out; its UI says the autograd mode it ran
    in and whether its output carries a history."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE",)
    OUTPUT_NODE = True
    FUNCTION = "apply"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def apply(self, image):
        import torch

        if not hasattr(self, "model"):
            self.model = torch.nn.Linear(3, 3)
            with torch.no_grad():
                self.model.weight.copy_(torch.tensor([[0.5, 0.25, 0.0], [0.0, 0.5, 0.25],
                                                      [0.25, 0.0, 0.5]]))
                self.model.bias.fill_(0.125)
        out = self.model(image)
        return {"ui": {"inference_mode": [torch.is_inference_mode_enabled()],
                       "grad_enabled": [torch.is_grad_enabled()],
                       "output_has_history": [out.requires_grad]},
                "result": (out,)}


class InvertWithNote:
    """IMAGE in; the IMAGE inverted and a note out (a node whose two outputs go two ways)."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE", "STRING")
    FUNCTION = "invert"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def invert(self, image):
        return (1.0 - image, "inverted")


class HeldCount:
    """IMAGE in and out; its UI says how many earlier nodes' outputs the worker running it holds
    for later nodes (isohost_comfy_worker.held), and -1 in process, where there is no such
    worker."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE",)
    OUTPUT_NODE = True
    FUNCTION = "count"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    def count(self, image):
        held = sys.modules.get("isohost_comfy_worker.held")
        return {"ui": {"held": [-1 if held is None else held.count()]}, "result": (image,)}


class LazySwitch:
    """Passes on one of two lazy inputs; ComfyUI evaluates only the one check_lazy_status
    asks for, so the other branch never runs."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "switch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"use_first": ("BOOLEAN", {"default": True}),
                             "first": ("IMAGE", {"lazy": True}),
                             "second": ("IMAGE", {"lazy": True})}}

    def check_lazy_status(self, use_first, first=None, second=None):
        if use_first:
            return ["first"] if first is None else []
        return ["second"] if second is None else []

    def switch(self, use_first, first=None, second=None):
        return (first if use_first else second,)


class PreviewSteps:
    """A progress bar with a preview image at each step, as a sampler's latent preview is
    sent: ("JPEG", a PIL image, the largest size to show)."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "steps"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"steps": ("INT", {"default": 3, "min": 1})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def steps(self, steps):
        from PIL import Image

        bar = comfy.utils.ProgressBar(steps)
        for step in range(steps):
            image = Image.new("RGB", (640, 320))
            image.putdata([((x * 255) // 639, (y * 255) // 319, (40 * step) % 256)
                           for y in range(320) for x in range(640)])
            bar.update_absolute(step + 1, steps, ("JPEG", image, 512))
        return _ui(steps=steps)


class ServerMessages:
    """What a pack sends through ComfyUI's server besides progress: a text under the node
    (send_progress_text), a binary event of raw bytes, an image for the server to encode, and
    one with metadata (ComfyUI's protocol.BinaryEventTypes: TEXT 3, UNENCODED_PREVIEW_IMAGE 2,
    PREVIEW_IMAGE_WITH_METADATA 4), and a named event."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "send"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "hello"})},
                "hidden": {"unique_id": "UNIQUE_ID"}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def send(self, text, unique_id):
        from PIL import Image
        from server import PromptServer

        server = PromptServer.instance
        image = Image.new("RGB", (300, 120))
        image.putdata([((x * 255) // 299, (y * 255) // 119, 90) for y in range(120)
                       for x in range(300)])
        server.send_progress_text(text, unique_id)
        server.send_sync(3, b"\x00\x01raw bytes\xff")
        server.send_sync(2, ("PNG", image, 100))
        server.send_sync(4, (("PNG", image, None), {"node_id": unique_id}))
        server.send_sync("isohost_test.sent", {"text": text})
        return _ui(sent=4)


class SplitWords:
    """A list output (OUTPUT_IS_LIST): ComfyUI runs a downstream node once per item."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("STRING", "INT")
    RETURN_NAMES = ("words", "count")
    OUTPUT_IS_LIST = (True, False)
    FUNCTION = "split"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"text": ("STRING", {"default": "one two three"})}}

    def split(self, text):
        words = text.split()
        return (words, len(words))


class JoinWords:
    """A list input (INPUT_IS_LIST): one call with every item."""
    CATEGORY = "isohost_test"
    INPUT_IS_LIST = True
    RETURN_TYPES = ("STRING",)
    OUTPUT_NODE = True
    FUNCTION = "join"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"words": ("STRING", {"forceInput": True}),
                             "separator": ("STRING", {"default": "+"})}}

    def join(self, words, separator):
        joined = separator[0].join(words)
        return {"ui": {"joined": [joined], "calls": [1]}, "result": (joined,)}


class QueueView:
    """What ComfyUI's queue says while this node runs: the prompt running, the tasks left, and a
    past prompt's history; a history map function refused; a Report prompt with the tag
    `requeue` put in the queue, numbered with the server's counter."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "view"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"past": ("STRING", {"default": ""}),
                             "requeue": ("STRING", {"default": ""})}}

    @classmethod
    def IS_CHANGED(cls, **kwargs):
        return always()

    def view(self, past, requeue):
        import uuid

        from server import PromptServer

        queue = PromptServer.instance.prompt_queue
        running, queued = queue.get_current_queue()
        history = queue.get_history(prompt_id=past)
        try:
            queue.get_history(map_function=lambda item: item)
            refused = ""
        except TypeError as e:
            refused = str(e)
        extra_data = running[0][3]
        number = PromptServer.instance.number  # as ComfyUI numbers a prompt it is sent
        PromptServer.instance.number += 1
        requeued = str(uuid.uuid4())
        queue.put((number, requeued, {"1": {"class_type": "ReportIsohost",
                                            "inputs": {"tag": requeue}}}, extra_data, ["1"]))
        return _ui(running=[item[1] for item in running], requeued=requeued,
                   number_step=PromptServer.instance.number - number,
                   items=sorted({type(item).__name__ for item in running + queued}),
                   keys=sorted({type(key).__name__ for key in queue.currently_running}),
                   remaining=queue.get_tasks_remaining(),
                   past_outputs=sorted(history.get(past, {}).get("outputs", {})),
                   refused=refused)


class AnyType(str):
    """ComfyUI's wildcard as packs write it: a type that no other type differs from."""

    def __ne__(self, other):
        return False


ANY = AnyType("*")


class AnyInputs(dict):
    """An INPUT_TYPES category that takes inputs of any name (those a pack's front end adds as
    they are linked), each of any type."""

    def __contains__(self, key):
        return True

    def __getitem__(self, key):
        return dict.get(self, key, (ANY,))


class PassAny:
    """A wildcard input and output, and optional inputs of any name: names what it got."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = (ANY,)
    OUTPUT_NODE = True
    FUNCTION = "pass_on"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": (ANY,)}, "optional": AnyInputs()}

    def pass_on(self, value, **more):
        return {"ui": {"more": sorted(more), "kind": [type(value).__name__]}, "result": (value,)}


class Positive:
    """VALIDATE_INPUTS written as ComfyUI's own LoadImage writes it, with `s` for the class."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "show"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"x": ("INT", {"default": 1, "min": -10, "max": 10})}}

    @classmethod
    def VALIDATE_INPUTS(s, x):
        return True if x > 0 else "x must be positive, not %d" % x

    def show(self, x):
        return _ui(x=x)


class Expand:
    """Expands into a node of ComfyUI's (GraphBuilder): names the prefix of the new ids."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("INT",)
    OUTPUT_NODE = True
    FUNCTION = "expand"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"value": ("INT", {"default": 1})}}

    def expand(self, value):
        from comfy_execution.graph_utils import GraphBuilder

        graph = GraphBuilder()
        added = graph.node("PrimitiveInt", value=value + 100)
        return {"result": (added.out(0),), "expand": graph.finalize(),
                "ui": {"prefix": [graph.prefix]}}


class StampSeed:
    """A seed node: writes the seed it used into the prompt and the PNG info, which the nodes
    after it (SaveImage) read."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ("INT",)
    FUNCTION = "stamp"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"default": -1, "min": -1, "max": 1 << 31})},
                "hidden": {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO",
                           "unique_id": "UNIQUE_ID"}}

    def stamp(self, seed, prompt, extra_pnginfo, unique_id):
        used = 12345 if seed < 0 else seed
        prompt[str(unique_id)]["inputs"]["seed"] = used
        extra_pnginfo["stamped_seed"] = used
        return (used,)


class ShowStamp:
    """What the prompt and the PNG info say of node `stamped`'s seed."""
    CATEGORY = "isohost_test"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "show"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"seed": ("INT", {"forceInput": True}),
                             "stamped": ("STRING", {"default": "1"})},
                "hidden": {"prompt": "PROMPT", "extra_pnginfo": "EXTRA_PNGINFO"}}

    def show(self, seed, stamped, prompt, extra_pnginfo):
        return _ui(seed=seed, in_prompt=prompt[stamped]["inputs"]["seed"],
                   in_pnginfo=extra_pnginfo.get("stamped_seed"))


NODE_CLASS_MAPPINGS = {cls.__name__ + "Isohost": cls for cls in (
    Report, ProgressLoop, BusyLoop, StuckInC, Counter, Raises, KillSelf, MakeModel, UseModel,
    Invert, InvertWithNote, ThroughModel, HeldCount, LazySwitch, SplitWords, JoinWords, PreviewSteps,
    PollingThread, MakeHolder, CheckpointName, ServerMessages, QueueView, PassAny, Positive,
    Expand, StampSeed, ShowStamp)}
NODE_DISPLAY_NAME_MAPPINGS = {"ReportIsohost": "Report (isohost test)"}
WEB_DIRECTORY = "./web"
