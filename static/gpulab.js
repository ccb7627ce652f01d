// gpulab.js: the little the portal does in the browser besides htmx. Every page works without
// it; it only makes the live log follow its tail.
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
