"""Who may use the app: bound to loopback it is open; bound to anything else (an empty address means every
interface) every page needs the password, and failed attempts are throttled per browser session and for the whole
app (an attacker can open new sessions at will)."""

from __future__ import annotations

import hmac
import math
import threading
import time
import unicodedata
from collections import deque

from grpo_ui.api.specs import is_loopback

FREE_ATTEMPTS = 5  # per browser session before the waits start
GLOBAL_FREE_ATTEMPTS = 50  # failures of all sessions within WINDOW before everyone waits
FIRST_WAIT = 30.0  # seconds; doubles with every further failure
LONGEST_WAIT = 900.0
WINDOW = 900.0  # seconds a failure counts for


def needs_password(address: str | None) -> bool:
    """Anything but a loopback address or 'localhost': empty (Streamlit then listens on every interface), 0.0.0.0,
    ::, a LAN address, or a host name (it may resolve to anything)."""
    return not is_loopback((address or "").strip().removeprefix("[").removesuffix("]"))


def password_matches(given: str, expected: str) -> bool:
    """Constant-time comparison of the UTF-8 bytes (any language's characters; composed and decomposed accents
    alike)."""
    def canonical(text: str) -> bytes:
        return unicodedata.normalize("NFC", text).encode("utf-8")
    return hmac.compare_digest(canonical(given), canonical(expected))


class Throttle:
    """Failed password attempts → how long before the next one is heard: FREE_ATTEMPTS per session, then a wait that
    doubles with each failure; the same for all sessions together beyond GLOBAL_FREE_ATTEMPTS."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, deque[float]] = {}
        self._all: deque[float] = deque()

    def _forget_old(self, now: float) -> None:
        for times in [*self._sessions.values(), self._all]:
            while times and times[0] < now - WINDOW:
                times.popleft()
        for key in [k for k, v in self._sessions.items() if not v]:
            del self._sessions[key]

    @staticmethod
    def _wait(times: deque[float], free: int, now: float) -> float:
        if len(times) < free:
            return 0.0
        return max(0.0, times[-1] + min(FIRST_WAIT * 2 ** (len(times) - free), LONGEST_WAIT) - now)

    def wait(self, session: str) -> float:
        """Seconds before ``session`` may try again (0: now)."""
        with self._lock:
            now = self.clock()
            self._forget_old(now)
            return max(self._wait(self._sessions.get(session, deque()), FREE_ATTEMPTS, now),
                       self._wait(self._all, GLOBAL_FREE_ATTEMPTS, now))

    def failed(self, session: str) -> None:
        with self._lock:
            now = self.clock()
            self._sessions.setdefault(session, deque()).append(now)
            self._all.append(now)

    def left(self, session: str) -> int:
        """Failures ``session`` may still have before its waits start."""
        with self._lock:
            return max(0, FREE_ATTEMPTS - len(self._sessions.get(session, ())))

    def succeeded(self, session: str) -> None:
        with self._lock:
            self._sessions.pop(session, None)


THROTTLE = Throttle()


def sign_in(session: str, given: str, expected: str, throttle: Throttle = THROTTLE) -> str | None:
    """None when ``given`` is the password; otherwise what to tell the user. While a wait runs the attempt is not
    checked at all (so it tells nothing about the password)."""
    wait = throttle.wait(session)
    if wait > 0:
        return f"Not checked: too many failed attempts, try again in {math.ceil(wait)} s."
    if password_matches(given, expected):
        throttle.succeeded(session)
        return None
    throttle.failed(session)
    wait = throttle.wait(session)
    if wait > 0:
        return f"Wrong password; too many failed attempts: wait {math.ceil(wait)} s before the next one."
    return f"Wrong password; {throttle.left(session)} attempt(s) left before a wait."
