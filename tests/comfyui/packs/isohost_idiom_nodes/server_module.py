"""What packs import from ComfyUI's `server` and read of its PromptServer: BinaryEventTypes
(for send_sync of a preview), and where the server listens (packs that call ComfyUI's own HTTP
API)."""

from server import BinaryEventTypes, PromptServer


class ServerFacts:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ()
    OUTPUT_NODE = True
    FUNCTION = "facts"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {}}

    @classmethod
    def IS_CHANGED(cls):
        return float("nan")

    def facts(self):
        from comfy.cli_args import args

        server = PromptServer.instance
        return {"ui": {"facts": [{"text_event": BinaryEventTypes.TEXT, "port": server.port,
                                  "address": server.address, "args_port": args.port,
                                  "args_listen": args.listen,
                                  "supports": list(server.supports)}]}, "result": ()}


NODE_CLASS_MAPPINGS = {"ServerFactsIdiomIsohost": ServerFacts}
