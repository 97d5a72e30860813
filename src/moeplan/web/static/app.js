// moeplan serve: copy buttons, and clean question URLs (empty fields left out). htmx does the rest.
(function () {
  "use strict";
  function copyText(text, button) {
    var done = function () {
      button.dataset.copied = "1";
      button.textContent = "Copied";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
    } else {
      fallback(text);
      done();
    }
  }
  function fallback(text) {
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } catch (e) { /* nothing to copy with */ }
    document.body.removeChild(area);
  }
  document.addEventListener("click", function (event) {
    var button = event.target.closest("button[data-copy]");
    if (!button) return;
    var block = document.querySelector(button.dataset.copy);
    if (block) copyText(block.textContent, button);
  });
  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.verb !== "get") return;
    var params = event.detail.parameters;
    var names = [];
    if (typeof params.keys === "function") {
      for (var k of params.keys()) names.push(k);
    } else {
      names = Object.keys(params);
    }
    names.forEach(function (name) {
      var v = typeof params.get === "function" ? params.get(name) : params[name];
      if (name === "file" || /_file$/.test(name) || v === "" || v === null || v === undefined || (typeof v === "object" && !(typeof v === "string"))) {
        if (typeof params.delete === "function") params.delete(name); else delete params[name];
      }
    });
  });
  // a new question shows plan 1 again (the plan picker sets it through its own links)
  document.addEventListener("change", function (event) {
    var form = event.target.form;
    if (form && form.id === "plan-form" && event.target.name !== "plan" && form.elements.plan) form.elements.plan.value = "";
  }, true);
})();
