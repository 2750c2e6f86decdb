// The job page's Connect panel: shown while the job runs, and for members a terminal in the
// page (xterm.js) on the job's terminal socket (apps/jobs/web/terminal.py says what travels).
// The page's state pushes replace #connect-state; the panel follows it: it appears when the
// job starts running and its SSH command and Open button go when the job stops. A terminal
// that was opened stays on the page with the reason it closed.
(function () {
  "use strict";
  var panel = document.getElementById("connect-panel");
  if (!panel) return;
  var openButton = document.getElementById("terminal-open");
  var box = document.getElementById("terminal-box");
  var used = false;  // a terminal was opened on this page: keep it (and why it closed) in view
  var socket = null;

  function running() {
    var marker = document.getElementById("connect-state");
    return !!marker && marker.dataset.state === "running";
  }

  function sync() {
    var now = running();
    panel.dataset.running = now ? "true" : "false";
    panel.hidden = !now && !used;
    if (openButton) openButton.hidden = !now || socket !== null;
    var closeButton = document.getElementById("terminal-close");
    if (closeButton) closeButton.textContent = socket ? "Close terminal" : "Hide terminal";
  }
  document.addEventListener("htmx:oobAfterSwap", sync);
  document.addEventListener("htmx:wsAfterMessage", sync);
  sync();

  if (!openButton || typeof Terminal === "undefined") return;
  var statusLine = document.getElementById("terminal-status");
  var closeButton = document.getElementById("terminal-close");
  var container = document.getElementById("terminal");
  var encoder = new TextEncoder();
  var term = null;
  var fit = null;
  var reason = "";
  var CLOSE_CODES = {
    1006: "the connection was lost",
    4401: "you are signed out; sign in again",
    4403: "viewers cannot open sessions into a job",
    4404: "no such job",
    4429: "too many open pages; close one and try again",
  };

  function say(text, state) {
    statusLine.textContent = text;
    statusLine.dataset.state = state;
  }

  function send(data) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(data);
  }

  function fitNow() {
    if (!fit || box.hidden) return;
    try { fit.fit(); } catch (err) { console.warn("terminal: fit", err); }
  }
  var fitTimer = null;
  function fitSoon() {
    clearTimeout(fitTimer);
    fitTimer = setTimeout(fitNow, 50);
  }

  function showSize() {  // the size the shell was told, on the element (tests wait on it)
    container.dataset.cols = String(term.cols);
    container.dataset.rows = String(term.rows);
  }

  function makeTerminal() {
    term = new Terminal({
      cursorBlink: true,
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "DejaVu Sans Mono", monospace',
      fontSize: 14,
      lineHeight: 1.2,  // room below the baseline: underscores show
      scrollback: 5000,
      theme: { background: "#11151d", foreground: "#d8dee9", cursor: "#d8dee9" },
    });
    fit = new FitAddon.FitAddon();
    term.loadAddon(fit);
    term.open(container);
    // Tab belongs to the shell; Shift+Tab leaves the terminal (no keyboard trap), back to
    // the button before it, as Shift+Tab does anywhere else.
    term.attachCustomKeyEventHandler(function (event) {
      if (event.key === "Tab" && event.shiftKey && !event.ctrlKey && !event.altKey && !event.metaKey) {
        if (event.type === "keydown") closeButton.focus();
        event.preventDefault();
        return false;
      }
      return true;
    });
    term.onData(function (data) { send(encoder.encode(data)); });
    term.onBinary(function (data) {  // one byte per character (e.g. some mouse reports)
      var bytes = new Uint8Array(data.length);
      for (var i = 0; i < data.length; i++) bytes[i] = data.charCodeAt(i) & 255;
      send(bytes);
    });
    term.onResize(function (size) {
      showSize();
      send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows }));
    });
    window.addEventListener("resize", fitSoon);
    if (typeof ResizeObserver !== "undefined") new ResizeObserver(fitSoon).observe(container);
  }

  function open() {
    used = true;
    reason = "";
    box.hidden = false;
    openButton.setAttribute("aria-expanded", "true");
    if (!term) makeTerminal(); else term.reset();
    fitNow();
    showSize();
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(
      scheme + location.host + panel.dataset.terminalUrl +
      "?cols=" + term.cols + "&rows=" + term.rows
    );
    socket.binaryType = "arraybuffer";
    sync();
    say("Connecting…", "connecting");
    socket.onmessage = function (event) {
      if (typeof event.data !== "string") {
        term.write(new Uint8Array(event.data));
        return;
      }
      var message;
      try { message = JSON.parse(event.data); } catch (err) { return; }
      if (message.type === "status" && message.state === "connected") {
        say("Connected", "connected");
        term.focus();
      } else if (message.type === "closed") {
        reason = message.reason || "";
      }
    };
    socket.onclose = function (event) {
      var why = reason || CLOSE_CODES[event.code] || "the session ended";
      say("Closed: " + why, "closed");
      term.write("\r\n\x1b[2m[closed: " + why + "]\x1b[0m\r\n");
      socket = null;
      openButton.setAttribute("aria-expanded", "false");
      sync();
    };
  }

  openButton.addEventListener("click", open);
  closeButton.addEventListener("click", function () {
    if (socket) {
      reason = "you closed the terminal";
      socket.close(1000);
    } else {
      box.hidden = true;
      used = false;
      sync();
      openButton.focus();
    }
  });
})();
