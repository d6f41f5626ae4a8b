// layerscope report: sortable and filterable tables, chart tooltips, JSON download.
// Plain DOM, no library, no network.
(function () {
  "use strict";

  function sortKey(cell, numeric) {
    var raw = cell.getAttribute("data-sort");
    if (raw === null || raw === "") return null;
    if (numeric) {
      var v = parseFloat(raw);
      return isNaN(v) ? null : v;
    }
    return raw.toLowerCase();
  }

  function makeSortable(table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      th.setAttribute("tabindex", "0");
      th.title = "click to sort";
      function sort() {
        var numeric = th.classList.contains("num");
        var dir = th.getAttribute("aria-sort") === "descending" ? "ascending"
          : (th.getAttribute("aria-sort") === "ascending" ? "descending"
            : (numeric ? "descending" : "ascending"));
        heads.forEach(function (h) { h.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", dir);
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        rows.forEach(function (r, i) { r._lsIndex = i; });
        var sign = dir === "ascending" ? 1 : -1;
        rows.sort(function (a, b) {
          var ka = sortKey(a.cells[col], numeric), kb = sortKey(b.cells[col], numeric);
          if (ka === null && kb === null) return a._lsIndex - b._lsIndex;
          if (ka === null) return 1;  // missing values last in both directions
          if (kb === null) return -1;
          if (ka < kb) return -sign;
          if (ka > kb) return sign;
          return a._lsIndex - b._lsIndex;
        });
        rows.forEach(function (r) { body.appendChild(r); });
      }
      th.addEventListener("click", sort);
      th.addEventListener("keydown", function (e) {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); sort(); }
      });
    });
  }

  function makeFilter(input) {
    var table = document.getElementById(input.getAttribute("data-table"));
    var count = document.getElementById(input.getAttribute("data-count"));
    if (!table) return;
    var rows = Array.prototype.slice.call(table.tBodies[0].rows);
    function apply() {
      var terms = input.value.toLowerCase().split(/\s+/).filter(Boolean);
      var shown = 0;
      rows.forEach(function (r) {
        var text = r.textContent.toLowerCase();
        var ok = terms.every(function (t) { return text.indexOf(t) >= 0; });
        r.hidden = !ok;
        if (ok) shown += 1;
      });
      if (count) count.textContent = shown + " of " + rows.length + " rows";
    }
    input.addEventListener("input", apply);
    apply();
  }

  function tooltips() {
    var tip = document.getElementById("ls-tip");
    // Move each mark's <title> into data-tip so the fast tooltip replaces the slow native one.
    document.querySelectorAll(".ls-mark").forEach(function (m) {
      var t = m.querySelector("title");
      if (t) { m.setAttribute("data-tip", t.textContent); m.removeChild(t); }
    });
    if (!tip) return;
    document.addEventListener("mousemove", function (e) {
      var m = e.target.closest ? e.target.closest(".ls-mark") : null;
      if (!m || !m.getAttribute("data-tip")) { tip.hidden = true; return; }
      tip.textContent = m.getAttribute("data-tip");
      tip.hidden = false;
      var x = e.clientX + 14, y = e.clientY + 14;
      var w = tip.offsetWidth, h = tip.offsetHeight;
      if (x + w > window.innerWidth - 8) x = e.clientX - w - 14;
      if (y + h > window.innerHeight - 8) y = e.clientY - h - 14;
      tip.style.left = x + "px";
      tip.style.top = y + "px";
    });
  }

  function downloads() {
    document.querySelectorAll("button.ls-download").forEach(function (b) {
      b.addEventListener("click", function () {
        var src = document.getElementById(b.getAttribute("data-for"));
        var blob = new Blob([src.textContent], { type: "application/json" });
        var a = document.createElement("a");
        a.href = URL.createObjectURL(blob);
        a.download = b.getAttribute("data-name") || "result.json";
        document.body.appendChild(a);
        a.click();
        setTimeout(function () { URL.revokeObjectURL(a.href); a.remove(); }, 0);
      });
    });
  }

  document.querySelectorAll("table.ls-table").forEach(makeSortable);
  document.querySelectorAll("input.ls-filter").forEach(makeFilter);
  tooltips();
  downloads();
  document.documentElement.setAttribute("data-ls-ready", "1");
})();
