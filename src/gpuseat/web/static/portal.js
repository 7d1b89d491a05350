// gpuseat portal: live refresh of seat readings and copy buttons. Plain JS, no inline scripts (CSP).
"use strict";
(function () {
  function fmtTime(ts) {
    if (!ts) return "never";
    return new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 16) + " UTC";
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
  function poll() {
    var url = document.body.dataset.liveUrl;
    if (!url) return;
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (!data) return;
        if (data.seats) {
          data.seats.forEach(function (s) {
            var row = document.querySelector('tr[data-seat="' + CSS.escape(s.seat) + '"]');
            if (row) fill(row, s.live, s.last_active);
          });
        } else {
          var live = document.getElementById("live");
          if (live) fill(live, data.live, data.last_active);
        }
      })
      .catch(function () { /* the next poll tries again */ });
  }
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
    if (!document.body.dataset.liveUrl) return;
    poll();
    var every = Math.max(1, parseInt(document.body.dataset.pollS || "5", 10)) * 1000;
    setInterval(poll, every);
  });
})();
