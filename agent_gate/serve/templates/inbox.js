// The inbox's one script, inlined in every page and allowed by its hash (headers.py).
// Without it every page still works: forms post, links lead; it adds the live list
// (polling with If-None-Match: a 304 while nothing changed) and the keyboard.
(function () {
  "use strict";
  var typing = function (e) {
    var t = e.target;
    return t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT|BUTTON)$/.test(t.tagName));
  };
  var follow = function (id) {
    var a = document.getElementById(id);
    if (a && a.href) { window.location.href = a.href; }
  };
  var list = document.getElementById("list");
  var card = document.querySelector("main div.card.call");
  var help = document.getElementById("keys");
  var focus = 0;
  var rows = function () { return Array.prototype.slice.call(document.querySelectorAll("#rows tr.row")); };
  var show = function (i) {
    var rs = rows();
    if (!rs.length) { return; }
    focus = Math.max(0, Math.min(i, rs.length - 1));
    rs.forEach(function (r, j) { r.classList.toggle("focus", j === focus); });
    rs[focus].scrollIntoView({block: "nearest"});
  };
  var answer = function (verb) {
    var picked = document.querySelectorAll("#rows input[name=pick]:checked");
    if (!picked.length) {
      var r = rows()[focus];
      var box = r && r.querySelector("input[name=pick]");
      if (!box) { return; }
      box.checked = true;
    }
    document.getElementById(verb + "-selected").click();
  };
  if (list) {
    var every = (parseFloat(list.dataset.poll) || 3) * 1000;
    var poll = function () {
      fetch("/inbox/rows?" + list.dataset.view, {
        headers: {"If-None-Match": list.dataset.etag}, credentials: "same-origin",
        cache: "no-store", redirect: "error"
      }).then(function (res) {
        if (res.status !== 200) { return null; }
        var tag = res.headers.get("ETag") || "";
        return res.text().then(function (html) {
          var doc = new DOMParser().parseFromString(html, "text/html");
          var body = doc.getElementById("rows"), counts = doc.getElementById("counts");
          if (!body || !counts) { return; }
          var known = {}, picked = {};
          rows().forEach(function (r) { known[r.id] = true; });
          document.querySelectorAll("#rows input[name=pick]:checked").forEach(function (b) { picked[b.value] = true; });
          body.querySelectorAll("tr.row").forEach(function (r) { if (!known[r.id]) { r.classList.add("new"); } });
          // A box stays ticked only for the same call with the same arguments.
          body.querySelectorAll("input[name=pick]").forEach(function (b) { b.checked = !!picked[b.value]; });
          document.getElementById("rows").replaceWith(document.adoptNode(body));
          document.getElementById("counts").replaceWith(document.adoptNode(counts));
          list.dataset.etag = tag;
          show(focus);
        });
      }).catch(function () { return null; }).then(function () { window.setTimeout(poll, every); });
    };
    window.setTimeout(poll, every);
    show(0);
  }
  document.addEventListener("keydown", function (e) {
    if (e.ctrlKey || e.metaKey || e.altKey || typing(e)) { return; }
    var k = e.key;
    if (k === "?" && help) { help.hidden = !help.hidden; return; }
    if (list) {
      if (k === "j" || k === "ArrowDown") { show(focus + 1); }
      else if (k === "k" || k === "ArrowUp") { show(focus - 1); }
      else if (k === "x") {
        var b = rows()[focus] && rows()[focus].querySelector("input[name=pick]");
        if (b) { b.checked = !b.checked; }
      } else if (k === "o" || k === "Enter") {
        var a = rows()[focus] && rows()[focus].querySelector("a.call-link");
        if (a) { window.location.href = a.href; }
      } else if (k === "a") { answer("approve"); }
      else if (k === "d") { answer("deny"); }
      else if (k === "/") { var q = document.getElementById("q"); if (q) { q.focus(); } }
      else { return; }
      e.preventDefault();
    } else if (card) {
      var button = k === "a" ? card.querySelector("button.approve") :
        k === "d" ? card.querySelector("button.deny") : null;
      if (button) { button.click(); }
      else if (k === "n" || k === "j") { follow("next"); }
      else if (k === "u" || k === "Escape") { follow("back"); }
      else { return; }
      e.preventDefault();
    }
  });
}());
