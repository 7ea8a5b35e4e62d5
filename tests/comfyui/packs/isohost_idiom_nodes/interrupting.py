"""A node that interrupts its own prompt, as ImpactInterrupt and image choosers' cancel do:
the node returns, and the prompt ends interrupted at the next node."""


class InterruptPrompt:
    CATEGORY = "isohost_idioms"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "interrupt"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",)}}

    @classmethod
    def IS_CHANGED(cls, image):
        return float("nan")

    def interrupt(self, image):
        import nodes

        nodes.interrupt_processing()
        return (image,)


NODE_CLASS_MAPPINGS = {"InterruptPromptIdiomIsohost": InterruptPrompt}
