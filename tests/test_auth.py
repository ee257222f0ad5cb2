"""Who may use the app: bind rules, the password compared as bytes, the attempt throttle (on a clock the test moves),
and the gate and error boundary of app.py through Streamlit's AppTest (the browser tests open every page URL)."""

from pathlib import Path

import pytest
from streamlit import config
from streamlit.testing.v1 import AppTest

from views import auth
from views.auth import FIRST_WAIT, FREE_ATTEMPTS, GLOBAL_FREE_ATTEMPTS, WINDOW, Throttle, sign_in

APP = str(Path(__file__).parent.parent / "app.py")


@pytest.mark.parametrize("address, needed", [
    ("127.0.0.1", False), ("127.0.0.2", False), ("localhost", False), ("::1", False), ("[::1]", False),
    ("", True), (None, True), ("0.0.0.0", True), ("::", True), ("10.1.2.3", True), ("192.168.0.5", True),
    ("fe80::1", True), ("myhost.example.com", True)])
def test_only_loopback_binds_are_open(address, needed):
    assert auth.needs_password(address) is needed


def test_passwords_compare_as_bytes_in_any_script():
    assert auth.password_matches("pässwörd-密码-🔑", "pässwörd-密码-🔑")
    assert auth.password_matches("cafe\u0301", "café")  # decomposed and composed accents are the same password
    assert not auth.password_matches("pässwörd", "passwörd") and not auth.password_matches("", "x")


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_session_gets_free_attempts_then_doubling_waits_and_a_wait_hides_the_answer():
    clock = Clock()
    t = Throttle(clock)
    for k in range(FREE_ATTEMPTS - 1):
        assert sign_in("s", "wrong", "right", t) == f"Wrong password; {FREE_ATTEMPTS - 1 - k} attempt(s) left before " \
                                                    "a wait."
    assert sign_in("s", "wrong", "right", t).startswith("Wrong password; too many failed attempts: wait 30 s")
    assert t.wait("s") == FIRST_WAIT
    assert sign_in("s", "right", "right", t).startswith("Not checked: too many failed attempts")
    assert t.wait("other") == 0  # another session is not held up by this one
    clock.now += FIRST_WAIT
    assert sign_in("s", "wrong", "right", t).startswith("Wrong password;") and t.wait("s") == 2 * FIRST_WAIT
    clock.now += 2 * FIRST_WAIT
    assert sign_in("s", "right", "right", t) is None and t.wait("s") == 0
    clock.now += WINDOW + 1
    assert t.wait("s") == 0


def test_failures_across_sessions_hold_everyone_up():
    """An attacker opens a new session per attempt: the app-wide count catches it."""
    clock = Clock()
    t = Throttle(clock)
    for k in range(GLOBAL_FREE_ATTEMPTS):
        assert sign_in(f"attacker-{k}", "guess", "right", t).startswith("Wrong password;")
    assert sign_in("new-session", "right", "right", t).startswith("Not checked: too many failed attempts")
    clock.now += WINDOW + 1  # old failures stop counting
    assert sign_in("new-session", "right", "right", t) is None


@pytest.fixture
def exposed(monkeypatch, tmp_path):
    """app.py as if started with --server.address 0.0.0.0 and a password."""
    monkeypatch.setenv("GRPO_UI_HOME", str(tmp_path))
    monkeypatch.setenv("GRPO_UI_DB", str(tmp_path / "db.sqlite"))
    monkeypatch.setenv("GRPO_UI_PASSWORD", "sesame")
    before = {k: config.get_option(k) for k in ("server.address", "client.showErrorDetails")}
    config.set_option("server.address", "0.0.0.0")
    yield
    for key, value in before.items():
        config.set_option(key, value)


def test_a_session_that_has_not_signed_in_runs_no_page_and_gets_no_error_details(exposed):
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert [t.value for t in at.title] == ["grpo-ui"] and not at.markdown and not at.metric
    assert config.get_option("client.showErrorDetails") == "none"
    at.text_input[0].input("sesame")
    at.button[0].click().run()
    assert "Configure a GRPO job" in [t.value for t in at.title]


def test_a_broken_page_shows_an_error_id_and_a_damaged_database_its_path(exposed, tmp_path, caplog):
    """The boundary: a user's problem (the database) shows its own message with the way out; an internal error
    shows only an id, and the traceback is in the server log under it."""
    (tmp_path / "db.sqlite").write_bytes(b"not a database at all" * 100)
    at = AppTest.from_file(APP, default_timeout=60)
    at.session_state["authenticated"] = True
    at.switch_page("views/history.py").run()
    assert not at.exception
    message = at.error[0].value
    assert str(tmp_path / "db.sqlite") in message and "move it aside" in message
    (tmp_path / "draft.yaml").write_text("name: [unclosed\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("grpo_ui.jobs.drafts.presets", lambda: (_ for _ in ()).throw(KeyError("boom")))
        mp.setenv("GRPO_UI_DB", str(tmp_path / "good.sqlite"))  # a new store: the first draft comes from a preset
        at = AppTest.from_file(APP, default_timeout=60)
        at.session_state["authenticated"] = True
        at.run()
    assert not at.exception
    shown = at.error[0].value
    assert shown.startswith("Something went wrong (error id ") and "boom" not in shown and "Traceback" not in shown
    error_id = shown.split("error id ")[1].split(")")[0]
    assert any(error_id in r.getMessage() and r.exc_info for r in caplog.records)
