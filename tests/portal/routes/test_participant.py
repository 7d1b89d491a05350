"""The participant router, ``/t/<token>…``: their page, live reading, SSH config and seat controls.

From the participant's side the link opens their own seat; from the adversary's, a made-up or rotated
link, another participant's link with one's own form token, a form without a token, a cross-site
form and a form naming another seat are refused, and nothing is written for the other seat.
"""

from __future__ import annotations

from .served import Served


def test_the_link_opens_only_its_own_participants_page(served: Served) -> None:
    ann, ben = served.links["ann"], served.links["ben"]
    page = served.client.get(f"/t/{ann}")
    assert page.status_code == 200 and page.headers["cache-control"] == "no-store"
    assert "mig-01" in page.text and "mig-02" not in page.text and "Ben" not in page.text
    assert 'href="/logout"' not in page.text and "/overview" not in page.text  # no organizer menu
    live = served.client.get(f"/t/{ben}/live")
    assert live.status_code == 200 and live.json()["participant"] == "ben" and live.json()["seat"] == "mig-02"
    controls = served.client.get(f"/t/{ann}/seat.json").json()
    assert controls["enabled"] is True and controls["hours"]["quota"] == 40
    # no way in recorded yet: no ssh_config to download
    no_way = served.client.get(f"/t/{ann}/ssh_config")
    assert no_way.status_code == 404 and "no SSH way in" in no_way.text


def test_unknown_and_rotated_links_open_nothing_and_guessing_is_limited(served: Served) -> None:
    made_up = "x" * 43
    r = served.client.get(f"/t/{made_up}")
    assert r.status_code == 404 and "not valid" in r.text
    assert served.client.get(f"/t/{made_up}/live").json() == {
        "error": "This link is not valid (it may have been replaced)."
    }
    assert served.client.get(f"/t/{made_up}/seat.json").status_code == 404
    old = served.links["ann"]
    served.store.tokens.rotate_tokens("lab", ["ann"])
    assert served.client.get(f"/t/{old}").status_code == 404
    codes = [served.client.get(f"/t/{'y' * 40}{i:03d}").status_code for i in range(25)]
    assert 429 in codes and codes[-1] == 429  # 20 guesses per address, then the limit answers
    assert served.client.get(f"/t/{served.links['ben']}").status_code == 200  # a valid link is never refused


def test_seat_controls_act_on_the_links_own_seat_only(served: Served) -> None:
    ann, ben = served.links["ann"], served.links["ben"]
    csrf = served.csrf(f"/t/{ann}")

    def post(token: str, **form: str) -> int:
        return served.client.post(f"/t/{token}/seat", data=form, follow_redirects=False).status_code

    assert post(ann, action="stop") == 403  # no form token
    assert post(ben, csrf=csrf, action="stop") == 403  # ann's form token on ben's link
    assert post(ann, csrf=csrf, action="stop", seat="mig-02") == 403  # ann's form naming ben's seat
    assert post("z" * 43, csrf=csrf, action="stop") == 404
    cross = served.client.post(
        f"/t/{ann}/seat",
        data={"csrf": csrf, "action": "stop"},
        headers={"origin": "https://evil.example.org"},
        follow_redirects=False,
    )
    assert cross.status_code == 403 and "cross-site" in cross.text
    assert served.store.requests.seat_requests("lab") == []
    # an organizer's session is no participant's form token
    assert served.login().status_code == 303
    assert post(ben, csrf=served.csrf("/overview"), action="stop") == 403
    done = served.client.post(f"/t/{ann}/seat", data={"csrf": csrf, "action": "stop"}, follow_redirects=False)
    assert (done.status_code, done.headers["location"]) == (303, f"/t/{ann}#controls")
    assert [(r.participant, r.seat, r.action) for r in served.store.requests.seat_requests("lab")] == [
        ("ann", "mig-01", "stop")
    ]
    refused = [e for e in served.store.events.events("lab") if e.action == "portal.refused"]
    assert [e.participant for e in refused] == ["ann"]


def test_refused_attempts_stop_being_logged_at_the_request_limit(served: Served) -> None:
    """Each refused attempt (a form naming another's seat) was an events row, and each row wakes the agents:
    a participant could grow the log and keep every agent planning without end. Past the requests' limit the
    attempt is answered 429 and nothing is written; ann's own request still goes through."""
    from gpuseat.store.requests import RATE_LIMIT

    ann = served.links["ann"]
    csrf = served.csrf(f"/t/{ann}")
    form = {"csrf": csrf, "action": "stop", "seat": "mig-02"}
    codes = [
        served.client.post(f"/t/{ann}/seat", data=form, follow_redirects=False).status_code
        for _ in range(RATE_LIMIT + 5)
    ]
    assert codes == [403] * RATE_LIMIT + [429] * 5
    refused = [e for e in served.store.events.events("lab") if e.action == "portal.refused"]
    assert len(refused) == RATE_LIMIT
    own = served.client.post(f"/t/{ann}/seat", data={"csrf": csrf, "action": "stop"}, follow_redirects=False)
    assert own.status_code == 303
