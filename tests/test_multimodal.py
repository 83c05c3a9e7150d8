"""MultimodalReActAgentWorker: the task's images reach the model in the OpenAI vision format."""

from __future__ import annotations

import base64
import struct
import zlib
from pathlib import Path

import pytest

from nbagent import (
    AgentRunner,
    FunctionTool,
    ImageDocument,
    MultimodalReActAgentWorker,
    ScriptedLLM,
)
from nbagent.viz.html import task_html, transcript_html
from nbagent.workers.multimodal import image_parts, images_html, to_image_document

try:
    from tests.openai_server import serve
except ImportError:  # run from inside tests/
    from openai_server import serve  # type: ignore[no-redef]


def png_bytes(rgb: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    """A valid 1x1 PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"\x00" + bytes(rgb)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def count_colors(image: str) -> str:
    """Count the colours in an image."""
    return "1 colour"


RED = png_bytes((255, 0, 0))
ANSWER = "Thought: I can see it.\nAnswer: A red square."


def make(replies: list[str], **kw: object) -> tuple[AgentRunner, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    worker = MultimodalReActAgentWorker([FunctionTool.from_defaults(count_colors)], multi_modal_llm=llm, **kw)  # type: ignore[arg-type]
    return AgentRunner(worker), llm


def test_missing_image_docs_is_a_clear_error() -> None:
    runner, _ = make([ANSWER])
    with pytest.raises(ValueError, match=r"needs the task's images in extra_state\['image_docs'\]"):
        runner.create_task("what is this?")
    with pytest.raises(ValueError, match="image_docs"):
        runner.chat("what is this?")
    with pytest.raises(TypeError, match="wrap a single image in a list"):
        runner.create_task("q", extra_state={"image_docs": "photo.png"})
    with pytest.raises(FileNotFoundError, match="'no-such.png' does not exist"):
        runner.create_task("q", extra_state={"image_docs": ["no-such.png"]})
    assert runner.list_tasks() == []


def test_paths_bytes_and_urls_go_to_the_model_as_vision_parts(tmp_path: Path) -> None:
    photo = tmp_path / "photo.png"
    photo.write_bytes(RED)
    runner, llm = make(["Thought: look\nAction: count_colors\nAction Input: {\"image\": \"photo\"}", ANSWER], image_detail="low")
    url = "https://example.org/cat.jpg"
    task = runner.create_task("What is in these?", extra_state={"image_docs": [str(photo), RED, url]})
    runner.run_step(task)
    first = llm.requests[0].messages
    user = [m for m in first if m.role.value == "user"][0]
    assert isinstance(user.content, list) and user.content[0] == {"type": "text", "text": "What is in these?"}
    data_url = "data:image/png;base64," + base64.b64encode(RED).decode()
    assert user.content[1:] == [
        {"type": "image_url", "image_url": {"url": data_url, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": data_url, "detail": "low"}},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
    ]
    assert "images" in first[0].text  # the system prompt says there are images
    runner.run_step(task)
    second = llm.requests[1].messages
    parts = [p for m in second if isinstance(m.content, list) for p in m.content if p["type"] == "image_url"]
    assert len(parts) == 3  # the question keeps its images; they are not sent twice
    assert str(runner.finalize_response(task)) == "A red square."
    remembered = runner.chat_history[0]
    assert isinstance(remembered.content, list) and len(remembered.content) == 4
    assert "[image: inline image]" in transcript_html([remembered])


def test_undo_of_the_first_step_does_not_duplicate_the_images() -> None:
    runner, llm = make(["Answer: one", "Answer: two"])
    task = runner.create_task("q", extra_state={"image_docs": [RED]})
    runner.run_step(task)
    runner.undo_step(task)
    runner.run_step(task)
    messages = task.scratch_memory.get_all()
    assert [m.role.value for m in messages] == ["user", "assistant"]
    assert len(llm.requests[1].messages[-1].content) == 2  # text + one image


def test_images_reach_the_openai_server_as_data_urls(tmp_path: Path) -> None:
    from nbagent.llms.openai import OpenAILLM

    photo = tmp_path / "p.png"
    photo.write_bytes(RED)
    with serve() as server:
        server.add(ANSWER)
        llm = OpenAILLM(model="fake-vision", base_url=server.base_url, api_key="sk-test", max_retries=0, timeout=10)
        runner = AgentRunner(
            MultimodalReActAgentWorker([], llm=llm), init_task_state_kwargs={"image_docs": [photo]}
        )
        assert str(runner.chat("Describe it.")) == "A red square."
        (user,) = [m for m in server.requests[0]["messages"] if m["role"] == "user"]
        assert user["content"][0] == {"type": "text", "text": "Describe it."}
        assert user["content"][1]["type"] == "image_url"
        assert user["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")


def test_image_documents_normalise_and_check_their_input(tmp_path: Path) -> None:
    path = tmp_path / "x.gif"
    path.write_bytes(b"GIF89a....")
    assert to_image_document(path).mimetype() == "image/gif"
    assert to_image_document({"image_url": "https://h/x.webp"}).is_remote
    doc = to_image_document(RED)
    assert doc.mimetype() == "image/png" and doc.data() == RED and doc.describe() == "inline image"
    assert to_image_document(doc) is doc
    data_url = "data:image/jpeg;base64," + base64.b64encode(b"\xff\xd8\xff..").decode()
    assert to_image_document(data_url).url() == data_url
    with pytest.raises(ValueError, match="exactly one of image"):
        ImageDocument(image_path="a.png", image_url="https://h/a.png")
    with pytest.raises(ValueError, match="exactly one of image"):
        ImageDocument()
    with pytest.raises(ValueError, match="image_url must be an http"):
        ImageDocument(image_url="ftp://h/a.png")
    with pytest.raises(ValueError, match="image_mimetype must look like"):
        ImageDocument(image_url="https://h/a.png", image_mimetype="text/html")
    with pytest.raises(ValueError, match="cannot tell the image type"):
        to_image_document(b"not an image").url()
    assert ImageDocument(image=base64.b64encode(b"??").decode(), image_mimetype="image/bmp").url().startswith(
        "data:image/bmp;base64,"
    )
    with pytest.raises(TypeError, match="an image must be"):
        to_image_document(42)

    class LlamaStyle:  # the reference's ImageDocument has these fields
        image = None
        image_path = None
        image_url = "https://h/y.png"
        image_mimetype = None
        text = "from the reference"

    assert to_image_document(LlamaStyle()).text == "from the reference"
    assert image_parts([RED])[0]["image_url"] == {"url": "data:image/png;base64," + base64.b64encode(RED).decode()}


def test_images_html_inlines_local_images_and_only_names_remote_ones(tmp_path: Path) -> None:
    photo = tmp_path / 'a"<b>.png'
    photo.write_bytes(RED)
    out = images_html([photo, "https://example.org/c.png?x=<y>"])
    assert out.count("<img ") == 1 and "data:image/png;base64," in out
    assert 'alt="a&quot;&lt;b&gt;.png"' in out and "<b>" not in out
    assert "[image: https://example.org/c.png?x=&lt;y&gt;]" in out and 'src="https' not in out
    loaded = images_html(["https://example.org/c.png"], load_remote=True)
    assert 'src="https://example.org/c.png"' in loaded and 'referrerpolicy="no-referrer"' in loaded
    broken = images_html([ImageDocument(image_path=str(tmp_path / "gone.png"))])
    assert "image not shown" in broken and "FileNotFoundError" in broken
    assert images_html([]) == ""
    assert images_html([RED]) == images_html([RED])  # pure


def test_task_view_shows_the_thumbnails() -> None:
    runner, _ = make([ANSWER])
    task = runner.create_task("q", extra_state={"image_docs": [ImageDocument(image=base64.b64encode(RED).decode(), text="red")]})
    view = task_html(task)
    assert "<img " in view and 'alt="red"' in view
    assert "<img " not in task_html(runner.create_task("q", extra_state={"image_docs": []}))


def test_constructor_arguments() -> None:
    llm = ScriptedLLM([ANSWER])
    worker = MultimodalReActAgentWorker.from_tools([count_colors], multi_modal_llm=llm, max_iterations=3)
    assert worker.multi_modal_llm is llm and worker.max_iterations == 3
    assert "MultimodalReActAgentWorker" in repr(worker)
    with pytest.raises(ValueError, match="not both"):
        MultimodalReActAgentWorker([], multi_modal_llm=llm, llm=ScriptedLLM([]))
    with pytest.raises(ValueError, match="needs a model"):
        MultimodalReActAgentWorker([])
    with pytest.raises(ValueError, match="image_detail"):
        MultimodalReActAgentWorker([], llm=llm, image_detail="huge")


def test_a_run_saved_when_image_documents_lived_in_the_worker_module_still_loads(tmp_path: Path) -> None:
    doc = ImageDocument(image=base64.b64encode(RED).decode("ascii"), text="red")
    runner, _ = make([ANSWER])
    task = runner.create_task("What colour is it?", extra_state={"image_docs": [doc]})
    runner.run_step(task)
    path = runner.save(tmp_path / "run.json")
    text = path.read_text(encoding="utf-8")
    assert '"nbagent.images:ImageDocument"' in text and "nbagent.workers.multimodal" not in text
    old = tmp_path / "old.json"  # the class reference as files written before the move name it
    old.write_text(text.replace('"nbagent.images:ImageDocument"', '"nbagent.workers.multimodal:ImageDocument"'))
    loaded = AgentRunner.load(old, runner.agent_worker)
    assert loaded.state_of(task.task_id).task.extra_state["image_docs"] == [doc]
