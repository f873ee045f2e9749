// flo-redis dashboard: refreshes the parts of a page marked data-live="<name>" from the
// page's live event stream (GET /live/<page path>?<page query>). The page is complete
// without this script; it only keeps those parts current. Served by the dashboard
// itself: its Content-Security-Policy allows scripts and connections to 'self' only.
(function () {
  "use strict";
  if (!window.EventSource || !document.querySelector("[data-live]")) return;
  var path = window.location.pathname.replace(/^\/+/, "");
  var source = new EventSource("/live/" + path + window.location.search);
  var on = document.querySelectorAll("[data-live-on]");
  var off = document.querySelectorAll("[data-live-off]");
  function live(yes) {
    document.documentElement.toggleAttribute("data-live-connected", yes);
    on.forEach(function (el) { el.hidden = !yes; });
    off.forEach(function (el) { el.hidden = yes; });
  }
  source.addEventListener("open", function () { live(true); });
  source.addEventListener("error", function () {
    live(false);  // the browser opens it again by itself unless it was refused
  });
  source.addEventListener("stale", function () { live(false); });
  source.addEventListener("region", function (event) {
    var update = JSON.parse(event.data);
    document.querySelectorAll("[data-live]").forEach(function (el) {
      if (el.getAttribute("data-live") === update.name) {
        el.innerHTML = update.html;  // drawn and escaped by the server, as the page was
      }
    });
    live(true);
  });
  window.addEventListener("pagehide", function () { source.close(); });
})();
