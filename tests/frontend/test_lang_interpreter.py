"""The interpreter on a scripted backend: text, variables, roles, scopes, forks, calls, errors."""

from __future__ import annotations

import threading
import time

import pytest

import sglang as sgl
from sglang.frontend.sampling_params import SamplingParams

from .scripted_backend import ScriptedBackend


def finishes_within(seconds: float, fn):
    """Run `fn` on a thread; fail (instead of hanging the suite) if it does not return in time."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:
            box["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"did not finish within {seconds}s (a hang)"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def length_reply(prompt, params: SamplingParams) -> str:
    return f"<{len(prompt.text)}>"


def test_text_variables_and_default_sampling_merge():
    seen: list[SamplingParams] = []

    def reply(prompt, params):
        seen.append(params)
        return "Paris"

    @sgl.function
    def capital(s, country):
        s += "The capital of " + country + " is" + sgl.gen("city", max_tokens=3, stop=".")
        s += ". " + sgl.gen("more")

    state = capital.run(country="France", backend=ScriptedBackend(reply), temperature=0.2, max_new_tokens=9)
    assert state["city"] == "Paris"
    assert state.text() == "The capital of France isParis. Paris"
    assert (seen[0].max_new_tokens, seen[0].stop, seen[0].temperature) == (3, ["."], 0.2)
    assert (seen[1].max_new_tokens, seen[1].stop, seen[1].temperature) == (9, [], 0.2)
    assert "city" in state and "nope" not in state


def test_reading_a_variable_blocks_only_until_it_is_produced():
    release = threading.Event()

    def reply(prompt, params):
        if "second" in prompt.text:
            release.wait(5)
        return "v"

    @sgl.function
    def prog(s):
        s += "first" + sgl.gen("a") + "second" + sgl.gen("b")

    state = prog.run(backend=ScriptedBackend(reply))
    assert finishes_within(2, lambda: state["a"]) == "v"  # while b is still blocked
    release.set()
    assert state["b"] == "v"


def test_roles_render_with_the_template_and_fill_messages():
    @sgl.function
    def chat(s, q):
        s += sgl.system("Be nice.")
        s += sgl.user(q)
        s += sgl.assistant_begin()
        s += sgl.gen("a")
        s += sgl.assistant_end()
        with s.user():
            s += "More?"
        with s.assistant():
            s += sgl.gen("b")

    backend = ScriptedBackend(lambda p, _: "ok", chat_template=sgl.get_chat_template("chatml"))
    state = chat.run(q="Hi", backend=backend)
    assert state.text() == (
        "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nMore?<|im_end|>\n"
        "<|im_start|>assistant\nok<|im_end|>\n"
    )
    assert [m["role"] for m in state.messages()] == ["system", "user", "assistant", "user", "assistant"]
    assert state.messages()[1] == {"role": "user", "content": "Hi"}
    # The template's end-of-turn marker is a stop string of every gen.
    gen_params = [v[1] for k, v in backend.calls if k == "generate"]
    assert all("<|im_end|>" in p.stop for p in gen_params)


def test_var_scope_captures_the_text_appended_inside():
    @sgl.function
    def prog(s):
        s += "Answer: "
        with s.var_scope("answer"):
            s += "4" + sgl.gen("x")
        s += " done"

    state = prog.run(backend=ScriptedBackend(lambda p, _: "2"))
    assert state["answer"] == "42"


def test_set_var_is_ordered_with_the_program():
    @sgl.function
    def prog(s):
        s += sgl.gen("x")
        s["y"] = "manual"

    state = prog.run(backend=ScriptedBackend())
    assert state["y"] == "manual" and state["x"] == "ok"


def test_fork_gather_variables_and_concatenate():
    @sgl.function
    def prog(s):
        s += "Tips:"
        forks = s.fork(3)
        forks += lambda i: f"[{i}]" + sgl.gen("tip")
        forks.join()
        s += "|"
        parts = s.fork(2)
        for i, f in enumerate(parts):
            f += f"<{i}>"
        parts.join("concate_and_append")
        s += sgl.gen("end")

    backend = ScriptedBackend(length_reply)
    state = prog.run(backend=backend)
    assert state["tip"] == ["<8>", "<8>", "<8>"]  # "Tips:[i]" is 8 characters in every fork
    assert state.text() == "Tips:|<0><1><12>"
    assert backend.kinds().count("commit") == 2  # each multi-way fork prefilled the shared text first


def test_forked_state_reads_its_own_and_inherited_variables():
    @sgl.function
    def prog(s):
        s += sgl.gen("base")
        forks = s.fork(2)
        forks += sgl.gen("leaf")
        s["seen"] = forks[1]["leaf"] + "/" + forks[0]["base"]

    state = prog.run(backend=ScriptedBackend(length_reply))
    assert state["seen"] == "<3>/<0>"  # leaf saw the 3 characters of "<0>"


def test_appending_to_one_fork_by_index():
    @sgl.function
    def prog(s):
        s += "P"
        forks = s.fork(2)
        for i in range(2):
            forks[i] += f"[{i}]"  # upstream style: ProgramStateGroup.__setitem__ takes the fork back
            forks[i] += sgl.gen("leaf")
        forks.join()

    state = prog.run(backend=ScriptedBackend(length_reply))
    assert state["leaf"] == ["<4>", "<4>"]  # each fork saw "P[i]"


def test_a_fork_cannot_be_replaced():
    @sgl.function
    def prog(s):
        forks = s.fork(2)
        forks[0] = forks[1]

    with pytest.raises(TypeError, match="cannot be replaced"):
        prog.run(backend=ScriptedBackend())


def test_gen_n_returns_all_choices_and_appends_the_first():
    @sgl.function
    def prog(s):
        s += "x" + sgl.gen("many", n=3)

    state = prog.run(backend=ScriptedBackend(lambda p, _: "a"))
    assert state["many"] == ["a0", "a1", "a2"]
    assert state.text() == "xa0"


def test_gen_with_choices_is_select():
    @sgl.function
    def prog(s):
        s += "Pick: " + sgl.gen("c", choices=["yes", "no"])

    state = prog.run(backend=ScriptedBackend(scores={"yes": [-2.0], "no": [-0.5]}))
    assert state["c"] == "no" and state.text() == "Pick: no"


def test_calling_an_sgl_function_from_another():
    @sgl.function
    def expand(s, tip):
        s += "Expand: " + tip + sgl.gen("detail")

    @sgl.function
    def greet(s, name):
        s += "Hello " + name + ". "

    @sgl.function
    def outer(s):
        greet(s, "Ann")  # inline: appends to this same state
        s += sgl.gen("tip")
        branch = expand(tip=s["tip"])  # a program of its own, on this program's backend
        s += "Detail: " + branch["detail"]

    backend = ScriptedBackend(length_reply)
    state = outer.run(backend=backend)
    assert state.text() == "Hello Ann. <11>Detail: <12>"  # "Expand: <11>" is 12 characters


def test_bind_fixes_arguments():
    @sgl.function
    def prog(s, a, b):
        s += a + b

    bound = prog.bind(a="x")
    assert bound.run(b="y", backend=ScriptedBackend()).text() == "xy"
    with pytest.raises(TypeError):
        prog.bind(c=1)


def test_first_argument_must_be_s():
    with pytest.raises(TypeError, match='"s"'):

        @sgl.function
        def bad(state, x):
            pass


def test_backend_error_surfaces_on_read_with_traceback_and_never_hangs():
    def reply(prompt, params):
        if "boom" in prompt.text:
            raise ConnectionError("server went away")
        return "fine"

    @sgl.function
    def prog(s):
        s += "a" + sgl.gen("ok")
        s += "boom" + sgl.gen("bad")
        s += sgl.gen("after")
        forks = s.fork(2)
        forks += sgl.gen("child")
        forks.join()

    state = prog.run(backend=ScriptedBackend(reply))
    assert finishes_within(5, lambda: state["ok"]) == "fine"  # produced before the failure
    for read in (lambda: state["bad"], lambda: state["after"], lambda: state["child"], state.text, state.sync):
        with pytest.raises(sgl.ProgramError) as info:
            finishes_within(5, read)
        assert isinstance(info.value.__cause__, ConnectionError)
        assert "server went away" in str(info.value) and "in reply" in str(info.value)
    assert isinstance(state.error(), ConnectionError)


def test_error_in_a_fork_reaches_the_parent_join():
    def reply(prompt, params):
        if prompt.text.endswith("1"):
            raise ValueError("fork one failed")
        return "x"

    @sgl.function
    def prog(s):
        forks = s.fork(2)
        forks += lambda i: str(i) + sgl.gen("v")
        forks.join()

    state = prog.run(backend=ScriptedBackend(reply))
    with pytest.raises(sgl.ProgramError, match="fork one failed"):
        finishes_within(5, lambda: state["v"])


def test_exception_in_the_program_body_propagates_unchanged():
    @sgl.function
    def prog(s):
        s += sgl.gen("x")
        raise KeyError("body bug")

    with pytest.raises(KeyError, match="body bug"):
        prog.run(backend=ScriptedBackend())


def test_image_needs_a_vision_backend():
    @sgl.function
    def prog(s, path):
        s += sgl.user(sgl.image(path) + "What is this?")

    state = prog.run(path="/nonexistent.png", backend=ScriptedBackend())
    with pytest.raises(sgl.ProgramError, match="does not accept images"):
        state.text()


def test_images_are_attached_to_the_message(tmp_path):
    picture = tmp_path / "p.png"
    picture.write_bytes(b"\x89PNG")
    backend = ScriptedBackend()
    backend.supports_images = True

    @sgl.function
    def prog(s):
        s += sgl.user(sgl.image(str(picture)) + "What is this?")
        s += sgl.gen("a")

    state = prog.run(backend=backend)
    content = state.messages()[0]["content"]
    assert content[0] == {"type": "text", "text": "<image>\nWhat is this?"}
    assert content[1]["image_url"]["url"] == "data:image/jpeg;base64,iVBORw=="
    prompt = backend.calls[0][1][0]
    assert [im.path for im in prompt.images] == [str(picture)]


def test_no_backend_is_a_clear_error():
    @sgl.function
    def prog(s):
        s += "x"

    with pytest.raises(ValueError, match="set_default_backend"):
        prog.run()


def test_default_backend_and_appending_after_run():
    sgl.set_default_backend(ScriptedBackend())

    @sgl.function
    def prog(s):
        s += "a"

    state = prog.run()
    state += "b" + sgl.gen("c")  # the stream accepts more after its program returned
    time.sleep(0.01)
    assert state["c"] == "ok" and state.text() == "abok"
