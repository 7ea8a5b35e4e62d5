// The test pack's front-end extension: ComfyUI serves it from the pack's WEB_DIRECTORY, in
// process or isolated alike.
import { app } from "../../scripts/app.js";

app.registerExtension({ name: "isohost.test_nodes" });
