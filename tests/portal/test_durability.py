"""SIGKILL in the middle of a burst of survey submissions: every acknowledged answer is in the database."""

from __future__ import annotations

import re
import signal
import threading
import time

import httpx

from gpuseat.services.demo import seed_demo
from gpuseat.services.survey import SurveyService
from gpuseat.store import open_store

from .live import csrf_of, start

SEQ = re.compile(r"seq-(\d+)")


def test_acknowledged_submissions_survive_sigkill(tmp_path):
    demo = seed_demo(tmp_path / "demo")
    store = open_store(demo.db_url)
    answered = {who for who in demo.links if SurveyService(store).response(demo.course, who) is not None}
    store.close()
    server = start(["--db", demo.db_url, "--course", demo.course, "--links-expire", "never"], tmp_path / "serve.log")
    acked: dict[str, int] = {}
    sent: dict[str, int] = {}
    stop = threading.Event()

    def participant(who: str, token: str) -> None:
        with httpx.Client(base_url=server.url, timeout=10) as c:
            try:
                csrf = csrf_of(c.get(f"/t/{token}").text)
            except httpx.HTTPError:
                return
            n = 0
            while not stop.is_set():
                n += 1
                sent[who] = n
                form = {
                    "csrf": csrf,
                    "q_expectations": str(1 + n % 10),
                    "q_format": "8",
                    "q_recommend": str(n % 11),
                    "q_result": "other",
                    "q_result_other": f"seq-{n}",
                }
                try:
                    r = c.post(f"/t/{token}/survey", data=form)
                except httpx.HTTPError:
                    return  # the server is gone
                if r.status_code == 200 and "your answers are saved" in r.text:
                    acked[who] = n  # a 2xx answer: stored and committed

    threads = [threading.Thread(target=participant, args=item) for item in demo.links.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    while sum(acked.values()) < 100 and time.monotonic() < deadline:  # a burst well under way
        time.sleep(0.05)
    server.proc.send_signal(signal.SIGKILL)
    server.proc.wait(10)
    stop.set()
    for t in threads:
        t.join(15)
    assert len(acked) >= 8, server.output()  # the kill hit a burst from many participants

    again = start(["--db", demo.db_url, "--course", demo.course, "--links-expire", "never"], tmp_path / "serve2.log")
    try:
        store = open_store(demo.db_url)
        surveys = SurveyService(store)
        for who, n in acked.items():
            answer = surveys.response(demo.course, who)
            stored = int(SEQ.fullmatch(answer["result"]["other"]).group(1))
            # the newest acknowledged edit, or a later one that was committed before its answer went out
            assert n <= stored <= sent[who], (who, n, stored)
        # one row per participant, never two: those who answered before, plus those who sent now
        assert len(answered | set(acked)) <= surveys.count(demo.course) <= len(answered | set(sent))
        store.close()
        assert httpx.get(f"{again.url}/t/{demo.links[next(iter(acked))]}").status_code == 200
    finally:
        assert again.stop() == 0
