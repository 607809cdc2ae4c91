// gatebot's pages: local times, relative ages, and live updates over
// server-sent events (the page fetches itself and swaps its <main>).
(function () {
  "use strict";

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d.getTime())) return;
      // The UTC time stays in the tooltip (the title attribute).
      t.textContent = d.toLocaleString(undefined, {
        year: "numeric", month: "short", day: "numeric",
        hour: "2-digit", minute: "2-digit", second: "2-digit"
      });
    });
  }

  function ago(ms) {
    var s = Math.max(0, Math.floor(ms / 1000));
    var d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    if (d) return d + "d" + (h ? " " + h + "h" : "");
    if (h) return h + "h" + (m ? " " + m + "m" : "");
    if (m) return m + "m";
    return s + "s";
  }

  function ages(root) {
    var now = Date.now();
    root.querySelectorAll("[data-since]").forEach(function (el) {
      var t = Date.parse(el.getAttribute("data-since"));
      if (!isNaN(t)) el.textContent = ago(now - t);
    });
  }

  var timer = null;
  function typing() {
    var a = document.activeElement;
    return a && (a.tagName === "INPUT" || a.tagName === "TEXTAREA") && a.closest("#live");
  }

  // At most one refetch per page every 700 ms, however often gates change:
  // busy replicas serve pages without starving Flagger's checks, and a change
  // still shows within a second.
  var last = 0;
  var EVERY = 700;

  function refresh() {
    timer = null;
    last = Date.now();
    if (typing()) { schedule(1000); return; }
    fetch(location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; })
      .then(function (html) {
        if (!html) return;
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
        var current = document.getElementById("live");
        if (!fresh || !current) return;
        current.replaceWith(document.importNode(fresh, true));
        var live = document.getElementById("live");
        localTimes(live);
        ages(live);
        document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
      })
      .catch(function () { /* the next change tries again */ });
  }

  function schedule(delay) {
    if (!timer) timer = setTimeout(refresh, Math.max(delay, last + EVERY - Date.now()));
  }

  function connect() {
    var state = document.getElementById("live-state");
    var say = function (text, on) {
      if (state) state.textContent = text;
      document.body.dataset.live = on ? "on" : "off";
    };
    if (!window.EventSource) { say("Live updates: not supported by this browser", false); return; }
    var opened = false;
    var events = new EventSource("/ui/events");
    events.addEventListener("ready", function () {
      // A reconnect may have missed changes: look again.
      if (opened) schedule(50);
      opened = true;
      say("Live updates: on", true);
    });
    events.addEventListener("change", function () { schedule(100); });
    events.addEventListener("error", function () { say("Live updates: reconnecting…", false); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    ages(document);
    setInterval(function () { ages(document); }, 30000);
    if (document.getElementById("live")) connect();
  });
})();
