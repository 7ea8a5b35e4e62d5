"""Nodes that list ComfyUI's input directory (packs/isohost_idiom_nodes/input_files.py): isolated,
their lists follow the host's input directory as in process, so a file uploaded or copied there
after the scan is offered and passes validation."""

import urllib.error
import urllib.request
import uuid

import pytest

from workflows import IMAGE_FILE

IMAGE = "LoadImageIdiomIsohost"
VIDEO = "LoadVideoIdiomIsohost"


def both(idiom_servers):
    return idiom_servers["isolated"], idiom_servers["in_process"]


def offered(server, node, name):
    return server.object_info()[node]["input"]["required"][name][0]


def size_found(server, node, name, value):
    """Runs `node` on `value`: the size of the file as the node found it."""
    kind, message, history = server.run({"1": {"class_type": node, "inputs": {name: value}}})
    assert kind == "execution_success", (message, server.log_tail())
    return history["outputs"]["1"]["size"][0]


def upload_image(server, name, data):
    """POST /upload/image as the front end sends it (multipart form data)."""
    boundary = uuid.uuid4().hex
    body = b"".join([
        b"--%s\r\n" % boundary.encode(),
        b'Content-Disposition: form-data; name="image"; filename="%s"\r\n' % name.encode(),
        b"Content-Type: image/png\r\n\r\n", data, b"\r\n--%s--\r\n" % boundary.encode()])
    request = urllib.request.Request(
        "http://127.0.0.1:%d/upload/image" % server.port, data=body, method="POST",
        headers={"Content-Type": "multipart/form-data; boundary=%s" % boundary})
    with urllib.request.urlopen(request, timeout=60) as response:
        assert response.status == 200


def test_the_lists_of_the_input_directory_are_as_in_process(idiom_servers):
    isolated, in_process = both(idiom_servers)
    for node in (IMAGE, VIDEO):
        listed = [server.object_info()[node] for server in (isolated, in_process)]
        assert listed[0] == listed[1]
    assert IMAGE_FILE in offered(isolated, IMAGE, "image")


def test_files_copied_into_the_input_directory_later_are_offered_and_run(idiom_servers):
    isolated, in_process = both(idiom_servers)
    stem = "later-%s" % uuid.uuid4().hex[:8]
    for server in (isolated, in_process):
        folder = server.base / "input" / (stem + "-videos")
        folder.mkdir()
        (folder / "clip.MP4").write_bytes(b"v" * 5)
        for suffix in (".png", ".jpg", ".txt", ".webm", ""):
            (server.base / "input" / (stem + suffix)).write_bytes(b"x" * 3)
    images = [offered(server, IMAGE, "image") for server in (isolated, in_process)]
    videos = [offered(server, VIDEO, "video") for server in (isolated, in_process)]
    assert images[0] == images[1] and videos[0] == videos[1]
    assert {stem + ".png", stem + ".jpg"} <= set(images[0])
    assert not {stem + ".txt", stem + ".webm", stem} & set(images[0])
    assert videos[0][0] == "none"
    assert {stem + ".webm", stem + "-videos/clip.MP4"} <= set(videos[0])
    assert stem + ".png" not in videos[0]
    for server in (isolated, in_process):
        assert size_found(server, IMAGE, "image", stem + ".jpg") == 3
        assert size_found(server, VIDEO, "video", stem + "-videos/clip.MP4") == 5


def test_an_image_uploaded_after_the_scan_is_offered_and_passes_validation(idiom_servers):
    isolated, in_process = both(idiom_servers)
    name = "uploaded-%s.png" % uuid.uuid4().hex[:8]
    data = (isolated.base / "input" / IMAGE_FILE).read_bytes()
    for server in (isolated, in_process):
        assert name not in offered(server, IMAGE, "image")
        upload_image(server, name, data)
        assert name in offered(server, IMAGE, "image")
        assert size_found(server, IMAGE, "image", name) == len(data)


@pytest.mark.parametrize("server_kind", ["isolated", "in_process"])
def test_a_name_not_in_the_input_directory_fails_validation(idiom_servers, server_kind):
    server = idiom_servers[server_kind]
    with pytest.raises(urllib.error.HTTPError) as refused:
        server.queue({"1": {"class_type": IMAGE, "inputs": {"image": "missing.png"}}})
    assert refused.value.code == 400
    assert b"value_not_in_list" in refused.value.read()
