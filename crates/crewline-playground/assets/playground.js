// crewline playground: a platform client in the page's own script.
//
// It speaks the crew wire protocol (crewline-protocol's events) over the browser's WebSocket
// as the voice platform does: system.init, then agent.ready; per user turn an
// agent.transcript.update and a system.llm.request with the whole conversation; the reply's
// start/chunk/end; the assistant's words sent back as agent.transcript.update once the reply
// ended; system.control.interrupt first when the caller talks over the agent. Every frame in and out is recorded with its time
// (ms since connect); the timeline, the figures and the JSONL download are drawn from that
// record alone, so a call loaded back from its JSONL looks as it did live.
//
// Voice uses the Web Speech API where the browser has it. Tests stand in for it by setting
// `window.crewlinePlaygroundSpeech = {Recognition, synth, Utterance}` before voice starts (it
// is read each time voice starts and each time a sentence is spoken).
"use strict";

(function () {
  const HANDSHAKE_TIMEOUT_MS = 10000;
  // A turn typed over a reply waits for the interrupted reply's end (as `crewline chat`
  // does), at most this long.
  const QUEUED_TURN_WAIT_MS = 3000;
  // The voice path's sentence settings, as crewline-speech's `Voice` (MAX_SENTENCE_CHARS).
  const MAX_SENTENCE_CHARS = 200;
  const PROTOCOL_VERSION = "1.0";
  const $ = (id) => document.getElementById(id);
  const Sentences = window.CrewlineSentence;

  // ---------------------------------------------------------------- the call's record

  function newCall(mode, label) {
    return {
      mode, // "live" or "replay"
      label,
      frames: [], // {t, dir: "in" | "out", frame}
      turns: [],
      open: [], // turns sent and not yet ended, oldest first: the crew answers in order
      queued: [], // turns typed over a reply, sent once it has ended: {text, source}
      messages: [], // the conversation as the platform holds it
      ready: false,
      readyAt: null,
      handoff: null,
      close: null,
      errors: [], // {t, severity, message}
      feed: [], // what the conversation panel shows: {kind, turn?, text?}
      strayChunks: 0,
      spoken: [], // {t, text}: what was handed to the synthesizer
      // What the whole call cost so far, as the crew's last `llm_usage` log said (an exact
      // decimal string in its price table's currency); null until one names money.
      cost: null,
      // Summaries of the oldest turns that landed (`context_summary` logs).
      summaries: 0,
    };
  }

  let call = newCall("live", "");
  let socket = null;
  let t0 = performance.now();
  let handshakeTimer = null;
  let nextSource = "text";

  const now = () => Math.round((performance.now() - t0) * 10) / 10;

  /** An event as the platform sends it: `type`, `timestamp`, then its fields. */
  function event(type, fields) {
    return Object.assign({ type, timestamp: new Date().toISOString() }, fields || {});
  }

  const isPlatformType = (type) =>
    typeof type === "string" && (type.startsWith("system.") || type === "agent.transcript.update");

  function lastTurn() {
    return call.turns.length ? call.turns[call.turns.length - 1] : null;
  }

  function newTurn(t, frame) {
    const messages = Array.isArray(frame.messages) ? frame.messages : [];
    let user = "";
    for (let i = messages.length - 1; i >= 0; i--) {
      if (messages[i] && messages[i].role === "user") {
        user = typeof messages[i].content === "string" ? messages[i].content : JSON.stringify(messages[i].content);
        break;
      }
    }
    return {
      index: call.turns.length + 1,
      user,
      source: call.mode === "live" ? nextSource : null,
      requestAt: t,
      startAt: null,
      firstChunkAt: null,
      firstSentenceAt: null,
      endAt: null,
      ended: false,
      requestId: null,
      text: "",
      // A tool call paused the reply: the text after it starts a new sentence, apart from
      // the text before it ("…that for you. In Paris…", not "…you.In Paris…").
      afterTool: false,
      chunks: 0,
      sentences: [], // {at, text}
      aggregator: new Sentences.SentenceAggregator(Sentences.DEFAULT_MIN_CHARS, MAX_SENTENCE_CHARS),
      tools: [],
      interruptAt: null,
      chunksAfterInterrupt: 0,
      leakedChunks: 0,
      speechStartAt: null,
      tokens: null,
      fatal: null,
      warnings: [],
      handoff: null,
      // Which model provider answered (the crew's `llm_provider` log, from a fallback
      // client); null on a crew with one model.
      provider: null,
      // What the turn cost and on which model (the crew's `llm_usage` log, with --log-usage);
      // cost is the crew's exact decimal string, null without prices.
      cost: null,
      model: null,
      // The conversation's size in tokens after the turn (the `llm_usage` log's
      // `context_tokens`), null when not logged.
      contextTokens: null,
    };
  }

  /** Records one frame and updates the call from it (live and replayed calls alike). */
  function record(dir, frame, t) {
    const entry = { t, dir, frame };
    call.frames.push(entry);
    apply(dir, frame, t);
    appendFrameRow(entry);
    scheduleRender();
  }

  function apply(dir, frame, t) {
    const type = frame && frame.type;
    if (dir === "out") {
      applyOut(type, frame, t);
    } else {
      applyIn(type, frame, t);
    }
  }

  function applyOut(type, frame, t) {
    switch (type) {
      case "system.llm.request": {
        const turn = newTurn(t, frame);
        call.turns.push(turn);
        call.open.push(turn);
        if (Array.isArray(frame.messages)) call.messages = frame.messages.slice();
        call.feed.push({ kind: "user", turn });
        call.feed.push({ kind: "agent", turn });
        break;
      }
      case "system.control.interrupt": {
        // It stops every reply still coming.
        const turns = call.open.length ? call.open : [lastTurn()].filter(Boolean);
        for (const turn of turns) if (turn.interruptAt === null) turn.interruptAt = t - turn.requestAt;
        break;
      }
      case "system.user.started_speaking": {
        const turn = latestOpen();
        if (turn && turn.speechStartAt === null) turn.speechStartAt = t - turn.requestAt;
        break;
      }
      default:
        break;
    }
  }

  /** The turn the crew answers now: the oldest one not ended. */
  const answering = () => call.open[0] || null;
  /** The turn sent last and not ended. */
  const latestOpen = () => call.open[call.open.length - 1] || null;

  function applyIn(type, frame, t) {
    const turn = answering();
    const rel = (x) => (turn ? x - turn.requestAt : null);
    switch (type) {
      case "agent.ready":
        call.ready = true;
        call.readyAt = t;
        break;
      case "agent.llm.response.start":
        if (turn && turn.startAt === null) {
          turn.startAt = rel(t);
          turn.requestId = frame.request_id == null ? null : String(frame.request_id);
        }
        break;
      case "agent.llm.response.chunk": {
        const text = typeof frame.text === "string" ? frame.text : "";
        if (!turn) {
          call.strayChunks += 1;
          const last = lastTurn();
          if (last && last.interruptAt !== null) last.leakedChunks += 1;
          break;
        }
        if (turn.interruptAt !== null) {
          // Sent before the crew saw the barge-in: not shown, not spoken, but counted.
          turn.chunksAfterInterrupt += 1;
          break;
        }
        if (turn.afterTool && text && turn.text && !/\s$/.test(turn.text) && !/^\s/.test(text)) {
          turn.text += " ";
        }
        if (text) turn.afterTool = false;
        turn.text += text;
        turn.chunks += 1;
        if (turn.firstChunkAt === null) turn.firstChunkAt = rel(t);
        for (const sentence of turn.aggregator.push(text)) addSentence(turn, sentence, rel(t));
        break;
      }
      case "agent.llm.response.end":
        if (!turn) break;
        turn.endAt = rel(t);
        turn.ended = true;
        if (turn.interruptAt === null) {
          const rest = turn.aggregator.flush();
          if (rest !== null) addSentence(turn, rest, rel(t));
        } else {
          turn.aggregator.discard();
        }
        call.open.shift();
        if (call.mode === "live") {
          commitAssistant(turn);
          if (!call.open.length) sendQueued();
        }
        break;
      case "agent.log":
        applyLog(frame, t);
        break;
      case "agent.error": {
        const severity = frame.severity === "fatal" ? "fatal" : "warning";
        const message = typeof frame.message === "string" ? frame.message : JSON.stringify(frame.message);
        call.errors.push({ t, severity, message });
        const target = turn || (call.ready ? lastTurn() : null);
        if (target) {
          if (severity === "fatal") target.fatal = message;
          else target.warnings.push(message);
        }
        break;
      }
      case "agent.end_call":
      case "agent.transfer_call": {
        const options = frame.transfer_options || {};
        call.handoff = {
          kind: type === "agent.end_call" ? "end_call" : "transfer_call",
          t,
          number: frame.transfer_call_number || null,
          transferType: options.type || null,
        };
        const target = turn || lastTurn();
        if (target) target.handoff = Object.assign({ at: t - target.requestAt }, call.handoff);
        call.feed.push({ kind: "system", text: handoffText(call.handoff) });
        break;
      }
      case "agent.speak": {
        const text = typeof frame.text === "string" ? frame.text : "";
        call.feed.push({ kind: "speak", text });
        if (turn && turn.interruptAt === null) {
          // Spoken as it is, after what was said before it (as crewline-speech's Voice).
          const rest = turn.aggregator.flush();
          if (rest !== null) addSentence(turn, rest, rel(t));
        }
        if (call.mode === "live") {
          const speech = new Sentences.SentenceAggregator(Sentences.DEFAULT_MIN_CHARS, MAX_SENTENCE_CHARS);
          const sentences = speech.push(text);
          const rest = speech.flush();
          if (rest !== null) sentences.push(rest);
          for (const sentence of sentences) voice.speak(sentence);
        }
        break;
      }
      default:
        break;
    }
    if (frame && typeof frame === "object") noteTokens(frame, answering() || lastTurn());
  }

  function addSentence(turn, text, at) {
    turn.sentences.push({ at, text });
    if (turn.firstSentenceAt === null) turn.firstSentenceAt = at;
    if (call.mode === "live") voice.speak(text);
  }

  function applyLog(frame, t) {
    const payload = frame.payload && typeof frame.payload === "object" ? frame.payload : {};
    const name = frame.name;
    if (name === "llm_provider") {
      applyProvider(payload);
      return;
    }
    if (name === "llm_usage") {
      applyUsage(payload);
      return;
    }
    if (name === "context_summary") {
      // A long call: the oldest turns were summarized (between turns), shown as a note.
      const n = (x) => (typeof x === "number" ? x : "?");
      call.summaries += 1;
      call.feed.push({
        kind: "system",
        text: `summarized ${n(payload.messages)} messages: context ${n(payload.tokens_before)} → ${n(payload.tokens_after)} tokens`,
      });
      return;
    }
    if (name === "tool_progress" || name === "tool_background") {
      // A slow tool: its progress (said ones are heard as agent.speak too) and the result of a
      // background call as it lands.
      const tool = String(payload.function_name || "?");
      const text =
        name === "tool_progress"
          ? `${tool}${payload.spoken ? " (said)" : ""}: ${String(payload.text || "")}`
          : `${tool} finished in the background${payload.error ? `: ${String(payload.error)}` : ""}`;
      call.feed.push({ kind: "system", text });
      return;
    }
    if (name !== "tool_call_start" && name !== "tool_call_end" && name !== "tool_call_error") return;
    const turn = answering() || lastTurn();
    if (!turn) return;
    const at = t - turn.requestAt;
    if (name === "tool_call_start" && !turn.ended && turn.interruptAt === null) {
      // The reply paused for a tool: what the model said before it is spoken now ("Let me
      // check that for you."), as crewline-speech's Voice does.
      const rest = turn.aggregator.flush();
      if (rest !== null) addSentence(turn, rest, at);
      turn.afterTool = true;
    }
    const context = payload.context && typeof payload.context === "object" ? payload.context : {};
    const id = payload.tool_call_id == null ? null : String(payload.tool_call_id);
    let tool = turn.tools.find((x) => x.id !== null && x.id === id && x.endAt === null);
    if (name === "tool_call_start" || !tool) {
      tool = {
        id,
        name: String(payload.function_name || "?"),
        args: context.arguments === undefined ? null : context.arguments,
        startAt: name === "tool_call_start" ? at : null,
        endAt: null,
        latency: null,
        result: undefined,
        error: null,
        errorKind: null,
        success: null,
      };
      turn.tools.push(tool);
      if (name === "tool_call_start") return;
    }
    tool.endAt = at;
    tool.latency = typeof payload.latency === "number" ? payload.latency : null;
    if (tool.startAt === null) tool.startAt = tool.latency === null ? at : Math.max(0, at - tool.latency);
    if (name === "tool_call_end") {
      tool.success = payload.success !== false;
      tool.result = context.response;
    } else {
      tool.success = false;
      tool.error = payload.error == null ? "failed" : typeof payload.error === "string" ? payload.error : JSON.stringify(payload.error);
      tool.errorKind = payload.error_kind == null ? null : String(payload.error_kind);
    }
  }

  /** The turn a crew's log names by its `turn_id` (a request id), else the one answering. */
  function loggedTurn(payload) {
    const id = payload.turn_id == null ? null : String(payload.turn_id);
    for (let i = call.turns.length - 1; i >= 0 && id !== null; i--) {
      if (call.turns[i].requestId === id) return call.turns[i];
    }
    return answering() || lastTurn();
  }

  /** The provider that answered a turn: the turn whose request id the log names, else the one answering. */
  function applyProvider(payload) {
    if (payload.provider == null) return;
    const turn = loggedTurn(payload);
    if (turn) turn.provider = short(String(payload.provider), 80);
  }

  /**
   * What a turn cost (`llm_usage`): its model, provider and money; the call's running total is
   * the crew's own exact sum, never added up here in floating point. Its tokens are read by
   * noteTokens like any frame's `usage`.
   */
  function applyUsage(payload) {
    const turn = loggedTurn(payload);
    if (turn) {
      if (typeof payload.model === "string") turn.model = short(payload.model, 80);
      if (typeof payload.provider === "string") turn.provider = short(payload.provider, 80);
      if (typeof payload.cost === "string") turn.cost = short(payload.cost, 40);
      if (typeof payload.context_tokens === "number") turn.contextTokens = payload.context_tokens;
    }
    const total = payload.call && typeof payload.call === "object" ? payload.call.cost : null;
    if (typeof total === "string") call.cost = short(total, 40);
  }

  /** Token counts where a frame reports them (`usage` objects, `*_tokens` fields). */
  function noteTokens(frame, turn) {
    if (!turn) return;
    const found = [frame, frame.payload, frame.usage, frame.payload && frame.payload.usage];
    for (const where of found) {
      if (!where || typeof where !== "object") continue;
      const prompt = where.prompt_tokens ?? where.input_tokens;
      const completion = where.completion_tokens ?? where.output_tokens;
      if (typeof prompt === "number" || typeof completion === "number") {
        turn.tokens = turn.tokens || { prompt: 0, completion: 0 };
        turn.tokens.prompt += typeof prompt === "number" ? prompt : 0;
        turn.tokens.completion += typeof completion === "number" ? completion : 0;
        return;
      }
    }
  }

  function handoffText(handoff) {
    if (handoff.kind === "end_call") return "the agent ended the call (agent.end_call)";
    const how = handoff.transferType ? ` (${handoff.transferType})` : "";
    return `the agent transferred the call to ${handoff.number || "?"}${how} (agent.transfer_call)`;
  }

  // ---------------------------------------------------------------- the platform client

  function send(frame) {
    if (!socket || socket.readyState !== WebSocket.OPEN) return false;
    // The platform sends binary frames of UTF-8 JSON.
    socket.send(new TextEncoder().encode(JSON.stringify(frame)));
    record("out", frame, now());
    return true;
  }

  function commitAssistant(turn) {
    if (!turn.text) return;
    call.messages.push({ role: "assistant", content: turn.text });
    send(event("agent.transcript.update", { role: "assistant", content: turn.text }));
  }

  /** Whether the agent is talking: a reply streams, or its audio still plays. */
  function agentTalking() {
    return call.open.some((turn) => turn.interruptAt === null) || voice.speaking();
  }

  /** Barge-in: stops the audio and sends `system.control.interrupt` (once per reply). */
  function interrupt() {
    if (call.mode !== "live" || !call.ready) return false;
    const wasSpeaking = voice.speaking();
    voice.cancel();
    const streaming = call.open.filter((turn) => turn.interruptAt === null);
    if (!streaming.length && !wasSpeaking) return false;
    for (const turn of streaming) turn.aggregator.discard();
    return send(event("system.control.interrupt"));
  }

  /**
   * A user turn, as the platform sends it. Over a streaming reply it is a barge-in, as in
   * `crewline chat`: the interrupt goes first, and the turn waits for the interrupted reply's
   * end (at most QUEUED_TURN_WAIT_MS).
   */
  function sendTurn(text, source) {
    text = String(text).trim();
    if (!text || call.mode !== "live" || !call.ready) return false;
    if (call.handoff) {
      showNote("the agent has ended the call; it answers no more turns");
      return false;
    }
    if (agentTalking()) interrupt();
    if (call.open.length) {
      call.queued.push({ text, source: source || "text" });
      const waiting = call;
      setTimeout(() => {
        if (call === waiting && call.queued.length) sendQueued();
      }, QUEUED_TURN_WAIT_MS);
      return true;
    }
    sendTurnNow(text, source);
    return true;
  }

  function sendQueued() {
    const queued = call.queued;
    call.queued = [];
    for (const item of queued) sendTurnNow(item.text, item.source);
  }

  function sendTurnNow(text, source) {
    if (call.handoff || !socket) return;
    nextSource = source || "text";
    send(event("agent.transcript.update", { role: "user", content: text }));
    call.messages.push({ role: "user", content: text });
    send(event("system.llm.request", { messages: call.messages.slice(), extra_params: {} }));
  }

  function readForm() {
    const url = $("crew-url").value.trim();
    if (!/^wss?:\/\//i.test(url)) throw new Error("the crew URL must start with ws:// or wss://");
    let target;
    try {
      target = new URL(url);
    } catch (_) {
      throw new Error(`the crew URL is not a URL: ${url}`);
    }
    const token = $("token").value;
    if (token) target.searchParams.set("token", token);
    let variables;
    try {
      variables = JSON.parse($("initial-variables").value.trim() || "{}");
    } catch (error) {
      throw new Error(`the initial variables are not JSON: ${error.message}`);
    }
    if (!variables || typeof variables !== "object" || Array.isArray(variables)) {
      throw new Error("the initial variables must be a JSON object");
    }
    return {
      url,
      target: target.toString(),
      token,
      init: event("system.init", {
        version: PROTOCOL_VERSION,
        session_context: {
          initial_variables: variables,
          conversation_type: $("conversation-type").value,
          caller: null,
        },
        output_agent_settings: { interruptible: $("interruptible").checked },
      }),
    };
  }

  function connect() {
    let form;
    try {
      form = readForm();
    } catch (error) {
      showConnectError(error.message);
      return;
    }
    disconnect();
    resetCall(newCall("live", form.url));
    showConnectError(null);
    setStatus("connecting", `connecting to ${form.url}`);
    let opened = false;
    t0 = performance.now();
    try {
      socket = new WebSocket(form.target);
    } catch (error) {
      showConnectError(`connect failed: ${error.message}`);
      setStatus("failed", "not connected");
      return;
    }
    const ws = socket;
    ws.binaryType = "arraybuffer";
    setConnected(true);
    ws.onopen = () => {
      opened = true;
      form.init.timestamp = new Date().toISOString();
      send(form.init);
      setStatus("connecting", `waiting for agent.ready from ${form.url}`);
      handshakeTimer = setTimeout(() => {
        if (!call.ready) {
          disconnect();
          showConnectError(`no agent.ready within ${HANDSHAKE_TIMEOUT_MS / 1000} s`);
          setStatus("failed", "not connected");
        }
      }, HANDSHAKE_TIMEOUT_MS);
    };
    ws.onmessage = (message) => {
      if (ws !== socket) return;
      let frame;
      try {
        const text = typeof message.data === "string" ? message.data : new TextDecoder().decode(message.data);
        frame = JSON.parse(text);
      } catch (error) {
        call.errors.push({ t: now(), severity: "warning", message: `an undecodable frame: ${error.message}` });
        scheduleRender();
        return;
      }
      const wasReady = call.ready;
      record("in", frame, now());
      if (!wasReady && frame.type === "agent.ready") {
        clearTimeout(handshakeTimer);
        setStatus("ready", `connected to ${form.url}`);
        send(event("system.user.joined"));
        setInputs(true);
      } else if (!wasReady && frame.type === "agent.error") {
        showConnectError(`the crew rejected the handshake: ${frame.message}`);
      }
    };
    ws.onclose = (close) => {
      clearTimeout(handshakeTimer);
      if (ws !== socket) return;
      socket = null;
      voice.stop();
      setConnected(false);
      setInputs(false);
      if (!opened) {
        const why = form.token
          ? "refused (check the token), or no crew is listening there"
          : "refused (a token may be needed: check the token), or no crew is listening there";
        showConnectError(`connect to ${form.url} failed: ${why} (close code ${close.code})`);
        setStatus("failed", "not connected");
        return;
      }
      call.close = { t: now(), code: close.code, reason: close.reason || "", byCaller: false };
      call.feed.push({ kind: "system", text: closeText(call.close) });
      setStatus(call.close.byCaller ? "idle" : "closed", closeText(call.close));
      scheduleRender();
    };
  }

  function closeText(close) {
    const reason = close.reason ? ` "${close.reason}"` : "";
    const who = close.byCaller ? "you hung up" : "the crew closed the connection";
    return `${who}: close code ${close.code}${reason}`;
  }

  /** Hangs up (close code 1000); the page lets go of the socket at once. */
  function disconnect() {
    const ws = socket;
    if (!ws) return;
    socket = null;
    clearTimeout(handshakeTimer);
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000, "the caller hung up");
    voice.stop();
    setConnected(false);
    setInputs(false);
    if (call.mode === "live" && call.ready) {
      call.close = { t: now(), code: 1000, reason: "the caller hung up", byCaller: true };
      call.feed.push({ kind: "system", text: closeText(call.close) });
    }
    setStatus("idle", "not connected");
    scheduleRender();
  }

  // ---------------------------------------------------------------- voice

  const voice = {
    listening: false,
    recognizer: null,
    pending: 0,
    heard: false,

    api() {
      const injected = window.crewlinePlaygroundSpeech || {};
      return {
        Recognition: injected.Recognition || window.SpeechRecognition || window.webkitSpeechRecognition || null,
        synth: injected.synth || window.speechSynthesis || null,
        Utterance: injected.Utterance || window.SpeechSynthesisUtterance || null,
      };
    },

    speak(text) {
      if (!$("speak-replies").checked || !text) return;
      const { synth, Utterance } = this.api();
      if (!synth) {
        showVoiceNote("This browser has no speech synthesis (Web Speech API): replies are shown, not spoken.");
        return;
      }
      const utterance = Utterance ? new Utterance(text) : { text };
      this.pending += 1;
      const done = () => {
        this.pending = Math.max(0, this.pending - 1);
        updateVoiceState();
      };
      utterance.onend = done;
      utterance.onerror = done;
      call.spoken.push({ t: now(), text });
      synth.speak(utterance);
      updateVoiceState();
    },

    speaking() {
      const { synth } = this.api();
      return this.pending > 0 || Boolean(synth && synth.speaking);
    },

    cancel() {
      const { synth } = this.api();
      if (synth && (this.pending > 0 || synth.speaking)) synth.cancel();
      this.pending = 0;
      updateVoiceState();
    },

    start() {
      const { Recognition } = this.api();
      if (!Recognition) {
        showVoiceNote("This browser has no speech recognition (Web Speech API; Chromium-based browsers and Safari have it): type your turns instead.");
        return;
      }
      const recognizer = new Recognition();
      recognizer.continuous = true;
      recognizer.interimResults = true;
      recognizer.lang = navigator.language || "en-US";
      recognizer.onspeechstart = () => this.speechStarted();
      recognizer.onresult = (e) => this.result(e);
      recognizer.onerror = (e) => {
        const what = e && e.error ? e.error : "error";
        showVoiceNote(`speech recognition: ${what}${what === "not-allowed" ? " (allow the microphone)" : ""}`);
      };
      recognizer.onend = () => {
        if (this.listening && this.recognizer === recognizer) {
          try {
            recognizer.start();
          } catch (_) {
            this.listening = false;
            updateVoiceState();
          }
        }
      };
      this.recognizer = recognizer;
      this.listening = true;
      $("speak-replies").checked = true;
      try {
        recognizer.start();
      } catch (error) {
        this.listening = false;
        showVoiceNote(`speech recognition could not start: ${error.message}`);
      }
      updateVoiceState();
    },

    stop() {
      this.listening = false;
      const recognizer = this.recognizer;
      this.recognizer = null;
      if (recognizer) {
        try {
          recognizer.stop();
        } catch (_) {
          // Already stopped.
        }
      }
      this.heard = false;
      updateVoiceState();
    },

    /** The caller starts speaking: over the agent, that is a barge-in. */
    speechStarted() {
      if (this.heard || !call.ready) return;
      this.heard = true;
      send(event("system.user.started_speaking"));
      if (agentTalking()) interrupt();
      updateVoiceState();
    },

    result(e) {
      const results = e && e.results ? e.results : [];
      for (let i = e.resultIndex || 0; i < results.length; i++) {
        const result = results[i];
        if (!this.heard) this.speechStarted();
        if (!result.isFinal) continue;
        const text = String((result[0] && result[0].transcript) || "").trim();
        this.heard = false;
        send(event("system.user.stopped_speaking"));
        if (text) sendTurn(text, "voice");
      }
      updateVoiceState();
    },
  };

  function updateVoiceState() {
    const el = $("voice-state");
    if (!el) return;
    const parts = [];
    if (voice.listening) parts.push(voice.heard ? "hearing you…" : "listening");
    if (voice.pending > 0) parts.push(`speaking (${voice.pending} queued)`);
    el.textContent = parts.join(" · ");
    const mic = $("mic");
    mic.textContent = voice.listening ? "Stop voice" : "Start voice";
    mic.classList.toggle("on", voice.listening);
  }

  // ---------------------------------------------------------------- JSONL

  /** The largest download, in characters: a long call is cut here, not the tab's memory. */
  const MAX_DOWNLOAD_CHARS = 32 * 1024 * 1024;

  /**
   * The call as JSONL: one frame a line, `{"t": ms since connect, "dir": "in"|"out", "frame"}`,
   * at most `maxChars` (default MAX_DOWNLOAD_CHARS); frames past it are left out, and a last
   * line `{"omitted": {"frames", "from_t"}}` says how many and from when.
   */
  function jsonl(maxChars) {
    return exportCall(maxChars).text;
  }

  /** `jsonl`'s text and how many frames it left out. */
  function exportCall(maxChars) {
    const cap = typeof maxChars === "number" && maxChars > 0 ? maxChars : MAX_DOWNLOAD_CHARS;
    const lines = [];
    let size = 0;
    let omitted = 0;
    for (let i = 0; i < call.frames.length; i++) {
      const f = call.frames[i];
      const line = JSON.stringify({ t: f.t, dir: f.dir, frame: f.frame }) + "\n";
      if (size + line.length > cap) {
        omitted = call.frames.length - i;
        lines.push(JSON.stringify({ omitted: { frames: omitted, from_t: f.t } }) + "\n");
        break;
      }
      size += line.length;
      lines.push(line);
    }
    return { text: lines.join(""), omitted };
  }

  /** Shows a call from its JSONL (as `jsonl` wrote it); returns the number of frames read. */
  function loadJsonl(text, label) {
    disconnect();
    resetCall(newCall("replay", label || "a loaded call"));
    const lines = String(text).split(/\r?\n/);
    let count = 0;
    lines.forEach((line, i) => {
      if (!line.trim()) return;
      let entry;
      try {
        entry = JSON.parse(line);
      } catch (error) {
        call.errors.push({ t: 0, severity: "warning", message: `line ${i + 1} is not JSON: ${error.message}` });
        return;
      }
      if (entry && entry.omitted && typeof entry.omitted === "object") {
        const omitted = entry.omitted;
        call.errors.push({
          t: 0,
          severity: "warning",
          message: `the download was cut at its size limit: ${omitted.frames} later frames (from ${fmt(omitted.from_t)}) are not in it`,
        });
        return;
      }
      if (!entry || (entry.dir !== "in" && entry.dir !== "out") || typeof entry.t !== "number" || !entry.frame) {
        call.errors.push({ t: 0, severity: "warning", message: `line ${i + 1} is not a frame of a call` });
        return;
      }
      record(entry.dir, entry.frame, entry.t);
      count += 1;
    });
    setStatus("replay", `viewing ${call.label}: ${count} frames`);
    scheduleRender();
    return count;
  }

  function download() {
    const { text, omitted } = exportCall();
    if (omitted) {
      showNote(
        `The call is larger than the download's limit (${MAX_DOWNLOAD_CHARS / 1024 / 1024} MB): its last ${plural(omitted, "frame")} are left out, as its last line says.`,
      );
    }
    const blob = new Blob([text], { type: "application/x-ndjson" });
    const url = URL.createObjectURL(blob);
    const a = document.createElement("a");
    a.href = url;
    a.download = `crewline-call-${new Date().toISOString().replace(/[:.]/g, "-")}.jsonl`;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // ---------------------------------------------------------------- figures

  const plural = (count, noun) => `${count} ${noun}${count === 1 ? "" : "s"}`;
  const fmt = (ms) => (ms === null || ms === undefined ? "—" : `${Math.round(ms)} ms`);

  function median(values) {
    if (!values.length) return null;
    const sorted = values.slice().sort((a, b) => a - b);
    const mid = Math.floor(sorted.length / 2);
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }

  /** The wall time the turn's tools took: the union of their intervals (parallel calls overlap). */
  function toolTime(turn) {
    const spans = turn.tools
      .filter((x) => x.startAt !== null && x.endAt !== null)
      .map((x) => [x.startAt, x.endAt])
      .sort((a, b) => a[0] - b[0]);
    if (!spans.length) return null;
    let total = 0;
    let [start, end] = spans[0];
    for (const [s, e] of spans.slice(1)) {
      if (s > end) {
        total += end - start;
        [start, end] = [s, e];
      } else {
        end = Math.max(end, e);
      }
    }
    return total + (end - start);
  }

  /** The figures of each turn and of the call. */
  function figures() {
    const turns = call.turns.map((turn) => ({
      index: turn.index,
      user: turn.user,
      timeToStart: turn.startAt,
      timeToFirstChunk: turn.firstChunkAt,
      timeToFirstSentence: turn.firstSentenceAt,
      timeToEnd: turn.endAt,
      tools: turn.tools.length,
      toolTime: toolTime(turn),
      tokens: turn.tokens,
      interruptedAt: turn.interruptAt,
      chunksAfterInterrupt: turn.chunksAfterInterrupt,
      leakedChunks: turn.leakedChunks,
      handoff: turn.handoff ? turn.handoff.kind : null,
      fatal: turn.fatal,
      provider: turn.provider,
      model: turn.model,
      cost: turn.cost,
      contextTokens: turn.contextTokens,
      reply: turn.text,
    }));
    const ttfc = turns.map((t) => t.timeToFirstChunk).filter((x) => x !== null);
    const ttfs = turns.map((t) => t.timeToFirstSentence).filter((x) => x !== null);
    const tokens = call.turns.filter((t) => t.tokens);
    return {
      turns,
      call: {
        turns: turns.length,
        connectToReady: call.readyAt,
        medianTimeToFirstChunk: median(ttfc),
        maxTimeToFirstChunk: ttfc.length ? Math.max(...ttfc) : null,
        medianTimeToFirstSentence: median(ttfs),
        toolCalls: turns.reduce((n, t) => n + t.tools, 0),
        toolTime: turns.reduce((n, t) => n + (t.toolTime || 0), 0),
        bargeIns: turns.filter((t) => t.interruptedAt !== null).length,
        tokens: tokens.length
          ? tokens.reduce((n, t) => n + t.tokens.prompt + t.tokens.completion, 0)
          : null,
        cost: call.cost,
        summaries: call.summaries,
        frames: call.frames.length,
        errors: call.errors.length,
      },
    };
  }

  // ---------------------------------------------------------------- rendering

  let renderQueued = false;
  function scheduleRender() {
    if (renderQueued) return;
    renderQueued = true;
    setTimeout(() => {
      renderQueued = false;
      render();
    }, 0);
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  function testid(node, id) {
    node.setAttribute("data-testid", id);
    return node;
  }

  function short(value, max) {
    let text = typeof value === "string" ? value : JSON.stringify(value);
    if (text === undefined) text = "";
    return text.length > max ? `${text.slice(0, max - 1)}…` : text;
  }

  function render() {
    renderConversation();
    renderTimeline();
    renderFigures();
    renderErrors();
    $("frame-count").textContent = `(${call.frames.length})`;
    $("download").disabled = call.frames.length === 0;
    $("clock").textContent = call.mode === "live" && socket ? `${Math.round(now())} ms since connect` : "";
  }

  function renderConversation() {
    const box = $("conversation");
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    box.replaceChildren();
    for (const item of call.feed) {
      if (item.kind === "user") {
        const bubble = testid(el("div", "bubble user"), "user-bubble");
        if (item.turn.source === "voice") bubble.appendChild(el("span", "via", "voice"));
        bubble.appendChild(document.createTextNode(item.turn.user));
        box.appendChild(bubble);
      } else if (item.kind === "agent") {
        const turn = item.turn;
        if (!turn.text && turn.ended && turn.interruptAt === null) continue;
        const bubble = testid(el("div", "bubble agent", turn.text || (turn.ended ? "" : "…")), "agent-bubble");
        bubble.dataset.turn = String(turn.index);
        if (turn.interruptAt !== null) bubble.classList.add("interrupted");
        box.appendChild(bubble);
      } else if (item.kind === "speak") {
        box.appendChild(testid(el("div", "bubble agent", item.text), "agent-speak"));
      } else {
        box.appendChild(testid(el("div", "bubble system", item.text), "system-note"));
      }
    }
    if (atBottom) box.scrollTop = box.scrollHeight;
  }

  function turnDuration(turn) {
    if (turn.endAt !== null) return turn.endAt;
    if (call.mode === "live") return Math.max(1, now() - turn.requestAt);
    const last = call.frames.length ? call.frames[call.frames.length - 1].t : turn.requestAt;
    return Math.max(1, last - turn.requestAt);
  }

  function renderTimeline() {
    const box = $("timeline");
    box.replaceChildren();
    if (!call.turns.length) {
      box.appendChild(el("p", "muted", "No turns yet: connect and say something."));
      return;
    }
    const scale = Math.max(1, ...call.turns.map(turnDuration));
    const pct = (ms) => `${Math.max(0, Math.min(100, (ms / scale) * 100))}%`;
    for (const turn of call.turns) {
      const row = testid(el("div", "turn"), "turn");
      row.dataset.index = String(turn.index);
      row.dataset.state = turn.interruptAt !== null ? "interrupted" : turn.ended ? "ended" : "open";
      const label = el("div", "turn-label");
      label.appendChild(el("div", "said", `#${turn.index} ${turn.source === "voice" ? "(voice) " : ""}${turn.user}`));
      label.appendChild(
        el("div", "times", `first chunk ${fmt(turn.firstChunkAt)} · end ${fmt(turn.endAt)}`),
      );
      if (turn.provider !== null) {
        const provider = testid(el("div", "provider", `answered by ${turn.provider}`), "turn-provider");
        provider.title = "the model provider that answered this turn (the crew's fallback client)";
        label.appendChild(provider);
      }
      if (turn.tokens || turn.cost !== null) {
        const tokens = turn.tokens ? `${turn.tokens.prompt} + ${turn.tokens.completion} tokens` : "";
        const money = turn.cost !== null ? `cost ${turn.cost}` : "";
        const context = turn.contextTokens !== null ? `context ${turn.contextTokens} tokens` : "";
        const text = [tokens, money, context].filter(Boolean).join(" · ");
        const cost = testid(el("div", "provider", text), "turn-cost");
        cost.title = "what this turn cost (the crew's llm_usage log): prompt + completion tokens, money in its price table's currency";
        label.appendChild(cost);
      }
      row.appendChild(label);

      const track = el("div", "turn-track");
      const duration = turnDuration(turn);
      const bar = testid(el("div", `turn-bar${turn.ended ? "" : " open"}`), "turn-bar");
      bar.style.width = pct(duration);
      bar.title = `request → first chunk ${fmt(turn.firstChunkAt)} → end ${fmt(turn.endAt)}`;
      if (turn.firstChunkAt !== null) {
        const talk = el("div", "talk");
        talk.style.left = `${(turn.firstChunkAt / duration) * 100}%`;
        talk.style.right = "0";
        bar.appendChild(talk);
      }
      if (turn.firstSentenceAt !== null) {
        const mark = el("div", "sentence");
        mark.style.left = `${(turn.firstSentenceAt / duration) * 100}%`;
        mark.title = `first sentence at ${fmt(turn.firstSentenceAt)}`;
        bar.appendChild(mark);
      }
      if (turn.interruptAt !== null) {
        const mark = testid(el("div", "barge-in"), "barge-in");
        mark.style.left = `${Math.min(100, (turn.interruptAt / duration) * 100)}%`;
        mark.title = `barge-in at ${fmt(turn.interruptAt)}`;
        bar.appendChild(mark);
      }
      track.appendChild(bar);

      for (const tool of turn.tools) {
        const state = tool.endAt === null ? "running" : tool.success === false ? "error" : "ok";
        const toolBar = testid(el("div", `tool-bar ${state === "ok" ? "" : state}`), "tool-bar");
        toolBar.dataset.name = tool.name;
        toolBar.dataset.state = state;
        if (tool.latency !== null) toolBar.dataset.latency = String(tool.latency);
        const start = tool.startAt || 0;
        const end = tool.endAt === null ? duration : tool.endAt;
        toolBar.style.marginLeft = pct(start);
        toolBar.style.width = pct(Math.max(0, end - start));
        const outcome =
          state === "running"
            ? "running"
            : state === "error"
              ? `${tool.errorKind || "error"}: ${tool.error}`
              : short(tool.result, 60);
        const latency = tool.latency !== null ? `${tool.latency} ms` : fmt(tool.endAt === null ? null : end - start);
        const text = `${tool.name}(${short(tool.args, 50)}) → ${outcome} · ${latency}`;
        toolBar.appendChild(testid(el("span", "tool-text", text), "tool-text"));
        toolBar.title = `${tool.name}\narguments: ${JSON.stringify(tool.args)}\n${
          state === "error" ? `error (${tool.errorKind || "?"}): ${tool.error}` : `result: ${JSON.stringify(tool.result)}`
        }\nlatency: ${latency}\nstarted ${fmt(start)} after the request`;
        track.appendChild(toolBar);
      }
      if (turn.interruptAt !== null) {
        const leaked = turn.leakedChunks ? `, ${plural(turn.leakedChunks, "chunk")} after its end (the crew talked on)` : "";
        const afterText = turn.endAt !== null && turn.interruptAt > turn.endAt;
        const text = afterText
          ? `▼ barge-in at ${fmt(turn.interruptAt)}, while the reply's audio still played (its text ended at ${fmt(turn.endAt)})${leaked}`
          : `▼ barge-in at ${fmt(turn.interruptAt)}${
              turn.endAt !== null ? `, end ${fmt(turn.endAt - turn.interruptAt)} after it` : ""
            }: ${plural(turn.chunksAfterInterrupt, "chunk")} in flight dropped${leaked}`;
        track.appendChild(testid(el("div", "marker", text), "barge-in-note"));
      }
      if (turn.handoff) {
        track.appendChild(testid(el("div", "marker handoff", `⇢ ${handoffText(turn.handoff)} at ${fmt(turn.handoff.at)}`), "handoff"));
      }
      if (turn.fatal) {
        track.appendChild(testid(el("div", "marker fatal", `✖ agent.error (fatal): ${turn.fatal}`), "turn-error"));
      }
      for (const warning of turn.warnings) {
        track.appendChild(el("div", "marker", `⚠ agent.error (warning): ${warning}`));
      }
      if (turn.text) track.appendChild(testid(el("div", "reply", turn.text), "reply"));
      row.appendChild(track);
      box.appendChild(row);
    }
  }

  function renderFigures() {
    const f = figures();
    const box = $("call-figures");
    box.replaceChildren();
    const cards = [
      ["turns", String(f.call.turns), "call-turns"],
      ["median first chunk", fmt(f.call.medianTimeToFirstChunk), "call-ttfc"],
      ["median first sentence", fmt(f.call.medianTimeToFirstSentence), "call-ttfs"],
      ["connect → ready", fmt(f.call.connectToReady), "call-ready"],
      ["tool calls", String(f.call.toolCalls), "call-tools"],
      ["tool time", fmt(f.call.toolCalls ? f.call.toolTime : null), "call-tool-time"],
      ["barge-ins", String(f.call.bargeIns), "call-barge-ins"],
      ["tokens", f.call.tokens === null ? "not reported" : String(f.call.tokens), "call-tokens"],
      ["cost", f.call.cost === null ? "not reported" : f.call.cost, "call-cost"],
    ];
    for (const [label, value, id] of cards) {
      const card = testid(el("div", "figure"), id);
      card.appendChild(el("div", "value", value));
      card.appendChild(el("div", "label", label));
      box.appendChild(card);
    }
    const body = $("turn-figures").tBodies[0];
    body.replaceChildren();
    for (const t of f.turns) {
      const row = testid(el("tr"), "turn-figure");
      row.dataset.index = String(t.index);
      const notes = [];
      if (t.interruptedAt !== null) notes.push(`barge-in at ${fmt(t.interruptedAt)}`);
      if (t.handoff) notes.push(t.handoff);
      if (t.fatal) notes.push("fatal error");
      if (t.provider !== null) notes.push(`answered by ${t.provider}`);
      if (t.model !== null) notes.push(`on ${t.model}`);
      if (t.cost !== null) notes.push(`cost ${t.cost}`);
      const cells = [
        [String(t.index), "index"],
        [t.user, "said"],
        [fmt(t.timeToFirstChunk), "ttfc"],
        [fmt(t.timeToFirstSentence), "ttfs"],
        [fmt(t.timeToEnd), "end"],
        [String(t.tools), "tools"],
        [fmt(t.toolTime), "tool-time"],
        [t.tokens ? `${t.tokens.prompt} + ${t.tokens.completion}` : "—", "tokens"],
        [notes.join(", "), "notes"],
      ];
      for (const [text, id] of cells) {
        const cell = testid(el("td", id === "said" ? "said" : "", text), id);
        if (id === "said") cell.title = text;
        row.appendChild(cell);
      }
      body.appendChild(row);
    }
    renderChart(f.turns);
  }

  const SVG = "http://www.w3.org/2000/svg";
  function svg(tag, attributes, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attributes || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  /** Time to first chunk over the call's turns, as a small inline SVG. */
  function renderChart(turns) {
    const box = $("ttfc-chart");
    box.replaceChildren();
    const points = turns.filter((t) => t.timeToFirstChunk !== null);
    const width = 400;
    const height = 120;
    const left = 44;
    // Room under the axis for the turn numbers, then the caption below them.
    const bottom = 30;
    const top = 10;
    const right = 10;
    const chart = svg("svg", { viewBox: `0 0 ${width} ${height}`, role: "img", "data-testid": "ttfc-svg" });
    chart.appendChild(svg("title", {}, "time to first chunk per turn"));
    chart.appendChild(svg("line", { class: "axis", x1: left, y1: height - bottom, x2: width - right, y2: height - bottom }));
    chart.appendChild(svg("line", { class: "axis", x1: left, y1: top, x2: left, y2: height - bottom }));
    const max = Math.max(1, ...points.map((t) => t.timeToFirstChunk));
    chart.appendChild(svg("text", { x: 2, y: top + 8 }, `${Math.round(max)} ms`));
    chart.appendChild(svg("text", { x: 2, y: height - bottom }, "0"));
    chart.appendChild(svg("text", { x: left, y: height - 3, class: "caption" }, "time to first chunk (ms), by turn"));
    const n = Math.max(turns.length, 1);
    const x = (index) => left + ((index - 0.5) / n) * (width - left - right);
    const y = (ms) => height - bottom - (ms / max) * (height - bottom - top);
    if (points.length > 1) {
      chart.appendChild(
        svg("polyline", { class: "line", points: points.map((t) => `${x(t.index)},${y(t.timeToFirstChunk)}`).join(" ") }),
      );
    }
    for (const t of points) {
      const dot = svg("circle", {
        class: `dot${t.interruptedAt !== null ? " interrupted" : ""}`,
        cx: x(t.index),
        cy: y(t.timeToFirstChunk),
        r: 3.5,
        "data-testid": "ttfc-point",
      });
      dot.appendChild(svg("title", {}, `turn ${t.index}: ${Math.round(t.timeToFirstChunk)} ms`));
      chart.appendChild(dot);
      chart.appendChild(svg("text", { x: x(t.index) - 3, y: height - bottom + 12 }, String(t.index)));
    }
    box.appendChild(chart);
  }

  function renderErrors() {
    const list = $("errors");
    list.replaceChildren();
    for (const error of call.errors) {
      const item = testid(el("li", error.severity, `${fmt(error.t)}: agent.error (${error.severity}): ${error.message}`), "error");
      if (error.message.startsWith("line ") || error.message.startsWith("an undecodable")) item.textContent = error.message;
      list.appendChild(item);
    }
    if (call.close && !call.close.byCaller) {
      list.appendChild(testid(el("li", "closed", `${fmt(call.close.t)}: ${closeText(call.close)}`), "close"));
    }
  }

  function gist(frame) {
    switch (frame.type) {
      case "agent.llm.response.chunk":
        return JSON.stringify(frame.text);
      case "agent.log":
        return `${frame.name} ${frame.payload && frame.payload.function_name ? frame.payload.function_name : ""}`;
      case "agent.error":
        return `${frame.severity}: ${frame.message}`;
      case "agent.transcript.update":
        return `${frame.role}: ${short(frame.content, 60)}`;
      case "system.llm.request":
        return `${Array.isArray(frame.messages) ? frame.messages.length : 0} messages`;
      case "agent.transfer_call":
        return frame.transfer_call_number || "";
      case "agent.speak":
        return JSON.stringify(frame.text);
      default:
        return "";
    }
  }

  function appendFrameRow(entry) {
    const list = $("frames");
    const item = testid(el("li", entry.dir), "frame");
    item.dataset.dir = entry.dir;
    item.dataset.type = String(entry.frame.type);
    if (entry.dir === "in" && isPlatformType(entry.frame.type)) item.classList.add("echo");
    if (entry.frame.type === "agent.error" && entry.frame.severity === "fatal") item.classList.add("fatal");
    const details = el("details");
    const summary = el("summary");
    summary.appendChild(el("span", "t", `${entry.t.toFixed(1)} ms`));
    summary.appendChild(el("span", `dir ${entry.dir}`, entry.dir === "out" ? "→" : "←"));
    summary.appendChild(el("span", "type", String(entry.frame.type)));
    summary.appendChild(el("span", "gist", short(gist(entry.frame), 90)));
    details.appendChild(summary);
    details.addEventListener(
      "toggle",
      () => {
        if (details.open && !details.querySelector("pre")) {
          details.appendChild(el("pre", "", JSON.stringify(entry.frame, null, 2)));
        }
      },
    );
    item.appendChild(details);
    const atBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
    list.appendChild(item);
    if (atBottom) list.scrollTop = list.scrollHeight;
  }

  // ---------------------------------------------------------------- page state

  function resetCall(next) {
    voice.cancel();
    call = next;
    $("frames").replaceChildren();
    $("voice-note").hidden = true;
    scheduleRender();
  }

  function setStatus(kind, text) {
    const status = $("status");
    status.className = `status ${kind}`;
    status.dataset.state = kind;
    status.textContent = text;
  }

  function showConnectError(text) {
    const box = $("connect-error");
    box.hidden = !text;
    box.textContent = text || "";
  }

  function showNote(text) {
    call.feed.push({ kind: "system", text });
    scheduleRender();
  }

  function showVoiceNote(text) {
    const note = $("voice-note");
    note.hidden = false;
    note.textContent = text;
  }

  function setConnected(connected) {
    $("connect").disabled = connected;
    $("disconnect").disabled = !connected;
  }

  function setInputs(enabled) {
    for (const id of ["say", "send", "interrupt", "mic"]) $(id).disabled = !enabled;
    // Only a sent turn barges in (Enter or Send), not typing itself.
    $("say").placeholder = enabled
      ? "Type a turn, press Enter (sending while the agent talks barges in)"
      : "Press Connect first, then type a turn here";
    if (enabled) $("say").focus();
  }

  async function loadConfig() {
    try {
      const response = await fetch("/config.json", { cache: "no-store" });
      if (!response.ok) return;
      const config = await response.json();
      if (typeof config.crew_url === "string" && config.crew_url) $("crew-url").value = config.crew_url;
      if (typeof config.token === "string") $("token").value = config.token;
    } catch (_) {
      // Served without a configuration (a saved copy of the page): the form's defaults stand.
    }
  }

  function speechSupportNote() {
    const { Recognition, synth } = voice.api();
    const missing = [];
    if (!Recognition) missing.push("speech recognition");
    if (!synth) missing.push("speech synthesis");
    if (missing.length) {
      showVoiceNote(
        `This browser has no ${missing.join(" and no ")} (Web Speech API)${
          Recognition ? "" : ": type your turns instead"
        }${synth ? "" : "; replies are shown, not spoken"}.`,
      );
    }
  }

  function init() {
    $("connect-form").addEventListener("submit", (e) => {
      e.preventDefault();
      connect();
    });
    $("disconnect").addEventListener("click", () => disconnect());
    $("say-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const input = $("say");
      if (sendTurn(input.value, "text")) input.value = "";
    });
    $("interrupt").addEventListener("click", () => {
      if (!interrupt() && call.ready) send(event("system.control.interrupt"));
    });
    $("mic").addEventListener("click", () => (voice.listening ? voice.stop() : voice.start()));
    $("download").addEventListener("click", download);
    $("load").addEventListener("change", async (e) => {
      const file = e.target.files && e.target.files[0];
      if (!file) return;
      loadJsonl(await file.text(), file.name);
      e.target.value = "";
    });
    $("show-echoes").addEventListener("change", (e) => $("frames").classList.toggle("hide-echoes", !e.target.checked));
    // Open bars grow while a reply streams.
    setInterval(() => {
      if (call.mode === "live" && socket) render();
    }, 250);
    speechSupportNote();
    render();
    loadConfig().then(() => {
      document.body.dataset.ready = "true";
    });
  }

  // For tests and the curious (the browser console): the call, its JSONL and figures.
  window.crewlinePlayground = {
    call: () => call,
    jsonl,
    loadJsonl,
    figures,
    connect,
    disconnect,
    sendTurn,
    interrupt,
    voice,
  };

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
