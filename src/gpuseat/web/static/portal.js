// gpuseat portal: live refresh of seat readings and copy buttons. Plain JS, no inline scripts (CSP).
"use strict";
(function () {
  // times in the course's time zone, to the minute, as the server writes them ("2016-06-06 14:05 CEST")
  function fmtTime(ts) {
    if (!ts) return "never";
    var tz = document.body.dataset.tz || "UTC";
    try {
      var parts = {};
      new Intl.DateTimeFormat("en-GB", {
        timeZone: tz, year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit",
        hourCycle: "h23", timeZoneName: "short"
      }).formatToParts(new Date(ts * 1000)).forEach(function (p) { parts[p.type] = p.value; });
      return parts.year + "-" + parts.month + "-" + parts.day + " " + parts.hour + ":" + parts.minute + " " + parts.timeZoneName;
    } catch (e) {
      return new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC";
    }
  }
  function mem(live) {
    if (!live || live.memory_used_mib === null) return "—";
    return live.memory_used_mib + (live.memory_total_mib ? " / " + live.memory_total_mib : "") + " MiB";
  }
  function util(live) {
    return live && live.utilization_gpu !== null ? live.utilization_gpu + " %" : "—";
  }
  function fill(root, live, last) {
    var m = root.querySelector(".mem"), u = root.querySelector(".util"), l = root.querySelector(".last");
    if (m) m.textContent = mem(live);
    if (u) u.textContent = util(live);
    if (l) l.textContent = fmtTime(last);
  }
  // a 401 poll names the login page ({"error", "login"}: the session ended or expired): go there once,
  // a path on this site only. The poll names its page (X-Gpuseat-Page: no Referer is ever sent), so the
  // login's "next" comes back here
  var leaving = false;
  function toLogin(body) {
    var to = body && typeof body.login === "string" ? body.login : "";
    if (to.charAt(0) === "/" && to.charAt(1) !== "/" && to.indexOf("\\") < 0) {
      leaving = true;
      window.location.assign(to);
    }
    return null;
  }
  // a participant's page that no longer says what is true: its seat changed (the organizer moved or released
  // them) or its link opens nothing now (rotated, revoked, the course archived or deleted). Say so at the top
  // instead of showing another seat's readings under this seat's way in; nothing reloads by itself (a survey
  // being typed would be lost)
  function stale(text) {
    var box = document.getElementById("page-stale");
    if (box) {
      box.textContent = text;
      box.hidden = false;
    }
  }
  function linkGone(body) {
    leaving = true; // the link opens nothing any more: no further polls
    stale(body && typeof body.error === "string" ? body.error : "This page is out of date: reload it.");
    return null;
  }
  // one poll of this page's JSON: its body, or null (a 401 goes to the login, a gone link says so)
  function getJSON(url) {
    var here = window.location.pathname + window.location.search;
    return fetch(url, { credentials: "same-origin", cache: "no-store", headers: { "X-Gpuseat-Page": here } })
      .then(function (r) {
        if (r.status === 401) return r.json().then(toLogin, function () { return null; });
        if (r.status === 404 || r.status === 410) return r.json().then(linkGone, function () { return null; });
        return r.ok ? r.json() : null;
      });
  }
  function poll() {
    var url = document.body.dataset.liveUrl;
    if (!url || leaving) return;
    getJSON(url)
      .then(function (data) {
        if (!data) return;
        if (data.seats) {
          data.seats.forEach(function (s) {
            var row = document.querySelector('tr[data-seat="' + CSS.escape(s.seat) + '"]');
            if (row) fill(row, s.live, s.last_active);
          });
          return;
        }
        var shown = document.body.dataset.seat;
        if (shown !== undefined && (data.seat || "") !== shown) {
          stale(data.seat ? "Your seat has changed since this page was loaded (it is now " + data.seat +
            "): reload the page to see it and how to connect to it." :
            "You no longer hold the seat this page shows: reload the page.");
          return;
        }
        var live = document.getElementById("live");
        if (live) fill(live, data.live, data.last_active);
      })
      .catch(function () { /* the next poll tries again */ });
  }
  // whether the participant changed a field on the page (typed, ticked, picked): a reload would lose it
  function edited() {
    var fields = document.querySelectorAll("input, textarea, select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "checkbox" || f.type === "radio") {
        if (f.checked !== f.defaultChecked) return true;
      } else if (f.tagName === "SELECT") {
        for (var j = 0; j < f.options.length; j++) {
          if (f.options[j].selected !== f.options[j].defaultSelected) return true;
        }
      } else if (f.value !== f.defaultValue) {
        return true;
      }
    }
    return false;
  }
  function said(r) {
    return r.action + ": " + r.state + (r.reason ? " (" + r.reason + ")" : "");
  }
  // a participant's request is pending (#requests-pending, a live region): ask seat.json every 2 s, backing
  // off to 30 s, until none is; each request's line follows its state. Then say what became of them where
  // the pending line was and reload so the controls show the seat as it is now, unless a field on the page
  // was changed (a survey or key being typed): then say "reload" instead. Text only, never the server's HTML
  function watchRequests() {
    var line = document.getElementById("requests-pending");
    var url = line && line.dataset.pollUrl;
    if (!url) return;
    var shown = {};
    document.querySelectorAll("#requests li[data-request]").forEach(function (li) {
      shown[li.dataset.request] = li;
    });
    var wait = 2000;
    function settled(data) {
      if (!data || !Array.isArray(data.requests)) return false;
      var outcome = [], pending = false;
      data.requests.forEach(function (r) {
        var li = shown[String(r.id)];
        if (r.state === "pending") pending = true;
        if (!li) return;
        if (li.classList.contains("pending") && r.state !== "pending") outcome.push(said(r));
        li.textContent = said(r);
        li.className = "state " + r.state;
      });
      if (pending) return false;
      line.textContent = (outcome.length ? outcome.join("; ") : "Your requests were carried out") + ".";
      if (edited()) {
        line.textContent += " Reload the page to see your seat's controls as they are now.";
      } else {
        // a moment to read (and hear) the outcome first; a field changed meanwhile keeps the page
        setTimeout(function () {
          if (edited()) line.textContent += " Reload the page to see your seat's controls as they are now.";
          else if (!leaving) window.location.reload();
        }, 1500);
      }
      return true;
    }
    function step() {
      if (leaving) return;
      getJSON(url)
        .then(settled, function () { return false; })
        .then(function (done) {
          if (done || leaving) return;
          wait = Math.min(wait * 1.5, 30000);
          setTimeout(step, wait);
        });
    }
    setTimeout(step, wait);
  }
  // destructive buttons carry data-confirm: ask before the form goes out (no inline script: CSP)
  document.addEventListener("submit", function (ev) {
    var btn = ev.submitter;
    if (btn && btn.dataset && btn.dataset.confirm && !window.confirm(btn.dataset.confirm)) ev.preventDefault();
  });
  document.addEventListener("click", function (ev) {
    var btn = ev.target.closest ? ev.target.closest("button.copy") : null;
    if (!btn) return;
    var text = btn.dataset.copy;
    var done = function () { btn.textContent = "copied"; btn.dataset.copied = "1"; };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, done);
    } else {
      var area = document.createElement("textarea");
      area.value = text; document.body.appendChild(area); area.select();
      try { document.execCommand("copy"); } catch (e) { /* ignore */ }
      area.remove(); done();
    }
  });
  document.addEventListener("DOMContentLoaded", function () {
    watchRequests();
    if (!document.body.dataset.liveUrl) return;
    poll();
    var every = Math.max(1, parseInt(document.body.dataset.pollS || "5", 10)) * 1000;
    setInterval(poll, every);
  });
})();
