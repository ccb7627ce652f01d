// gpulab.js: the little the portal does in the browser besides htmx. Every page works without
// it: it makes the live log follow its tail, and lays out a job pasted into the JSON editor
// on one line (the server does the same when the form comes back).
(function () {
  "use strict";

  // The live log (#job-log-box) stays scrolled to its last line as the tail appends new
  // output, unless the reader scrolled up to read something: then it stays where he is,
  // until he scrolls back to the bottom.
  var slack = 24; // px from the bottom that still count as "at the bottom"
  var follow = true;

  function box() {
    return document.getElementById("job-log-box");
  }

  function atBottom(b) {
    return b.scrollHeight - b.scrollTop - b.clientHeight <= slack;
  }

  function toBottom() {
    var b = box();
    if (b && follow) {
      b.scrollTop = b.scrollHeight;
    }
  }

  function init() {
    var b = box();
    if (!b) {
      return;
    }
    b.addEventListener("scroll", function () {
      follow = atBottom(b);
      b.dataset.following = String(follow);
    });
    b.dataset.following = "true";
    toBottom();
  }

  // A whole job pasted on one line into the JSON editor is laid out one field a line.
  document.addEventListener("paste", function (e) {
    var ed = e.target;
    if (!ed || ed.id !== "field-json") {
      return;
    }
    setTimeout(function () {
      var text = ed.value.trim();
      if (text.indexOf("\n") >= 0 || text.charAt(0) !== "{") {
        return;
      }
      try {
        ed.value = JSON.stringify(JSON.parse(text), null, 2);
      } catch (err) {
        // not (yet) a document: leave it as typed
      }
    }, 0);
  });

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
  document.addEventListener("htmx:afterSwap", function (e) {
    if (e.target && e.target.id === "job-log") {
      toBottom();
    }
  });
})();
