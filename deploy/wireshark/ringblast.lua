-- ringblast.lua: a Wireshark/tshark dissector for ringblast's packets.
--
-- Decodes
--   * UDP datagrams: the 32-byte header ("RBLS", version 2: flags, failed sends, flow, epoch,
--     64-bit sequence number, send timestamp) and the 18-byte compact header ("RBLC": failed
--     sends, flow, epoch, the sequence number's low 32 bits; no flags, no timestamp);
--   * a UDP GSO super-datagram (captured on the sending host before the kernel or the NIC cut
--     it up) as the segments it holds, each decoded and counted on its own;
--   * TCP records (`--proto tcp`): the record header (flags, length, flow, epoch, sequence
--     number, timestamp), reassembled across segments;
--   * control-channel frames on TCP (the sink's port): length, version, message type, the JSON
--     payload as text, and, when the frame is sealed, its seal (sequence number and
--     HMAC-SHA256 tag; the tag cannot be checked without the connection's key).
--
-- Expert info marks, per (source address, epoch, flow), a gap (a sequence jump: how many
-- packets are missing before this one), a repeat (a sequence number already seen: a duplicate)
-- and a late packet (one that fills an earlier gap). The accounting runs once, on the first
-- pass over the capture in frame order, and is kept per frame number, so clicking around in
-- Wireshark or a second pass shows the same marks. A compact header's 32-bit sequence number is
-- extended next to the flow's highest number, as the sink does.
--
-- Datagrams are found by their magic on any UDP port (a heuristic dissector) and on the port
-- of the `ringblast.port` preference (default 9900, the documented sink port), where the
-- control channel's TCP frames are decoded too. Another port: `-o ringblast.port:7000`, or
-- Decode As.
--
-- Install: copy to ~/.local/lib/wireshark/plugins/ (the Debian package installs it in
-- /usr/lib/x86_64-linux-gnu/wireshark/plugins/, the folder `tshark -G folders` lists as
-- "Global Lua Plugins"), or load it once: `tshark -X lua_script:ringblast.lua -r FILE`.
-- `ringblast generate wireshark-dissector` writes this file.

local rb = Proto("ringblast", "ringblast traffic")

local MAGIC = 0x52424C53 -- "RBLS"
local COMPACT_MAGIC = 0x52424C43 -- "RBLC"
local HEADER_LEN = 32
local COMPACT_LEN = 18
local VERSION = 2
local FLAG_RECORD = 0x80
local FLAG_RESPONSE = 0x40
local FLAG_REQUEST = 0x20
local FLAG_ACK = 0x10
local MAX_RECORD = 1048576
local MAX_FRAME = 256 * 1024
local CONTROL_VERSIONS = { [1] = true, [2] = true, [3] = true, [4] = true, [5] = true, [6] = true, [7] = true, [8] = true, [9] = true, [10] = true }
local SEAL_LEN = 40 -- 8-byte sequence number and 32-byte HMAC-SHA256 tag
local SPAN = 4294967296 -- 2^32

local forms = { [0] = "full", [1] = "compact" }
local kinds = {
    [1] = "ClientHello", [2] = "ServerChallenge", [3] = "ClientAuth", [4] = "AuthOk",
    [5] = "Refused", [6] = "Hello", [7] = "Welcome", [8] = "Progress", [9] = "Heartbeat",
    [10] = "Goodbye", [11] = "Verdict", [12] = "ClockProbe", [13] = "ClockReply",
    [14] = "ClockEstimate",
}

local f = {
    magic = ProtoField.uint32("ringblast.magic", "Magic", base.HEX),
    form = ProtoField.uint8("ringblast.form", "Header form", base.DEC, forms),
    version = ProtoField.uint8("ringblast.version", "Version", base.DEC),
    flags = ProtoField.uint8("ringblast.flags", "Flags", base.HEX),
    flag_record = ProtoField.bool("ringblast.flags.record", "TCP record", 8, nil, FLAG_RECORD),
    flag_response = ProtoField.bool("ringblast.flags.response", "Response", 8, nil, FLAG_RESPONSE),
    flag_request = ProtoField.bool("ringblast.flags.request", "Request", 8, nil, FLAG_REQUEST),
    flag_ack = ProtoField.bool("ringblast.flags.ack", "Acknowledgement", 8, nil, FLAG_ACK),
    failed = ProtoField.uint32("ringblast.failed", "Failed sends of this flow so far (mod 2^32)"),
    flow = ProtoField.uint16("ringblast.flow", "Flow"),
    epoch = ProtoField.uint32("ringblast.epoch", "Epoch", base.HEX),
    seq = ProtoField.uint64("ringblast.seq", "Sequence number"),
    seq_low = ProtoField.uint32("ringblast.seq_low", "Sequence number, low 32 bits"),
    timestamp = ProtoField.absolute_time("ringblast.timestamp", "Send timestamp", base.UTC),
    segment = ProtoField.uint16("ringblast.segment", "GSO segment"),
    segments = ProtoField.uint16("ringblast.segments", "GSO segments in this datagram"),
    payload = ProtoField.bytes("ringblast.payload", "Payload"),
    gap_missing = ProtoField.uint64("ringblast.gap.missing", "Missing before this packet"),
    repeat_of = ProtoField.framenum("ringblast.repeat.of", "Repeat of the packet in frame"),
    late = ProtoField.bool("ringblast.late", "Late: fills an earlier gap"),
    rec_len = ProtoField.uint32("ringblast.record.len", "Record length"),
    rec_response_len = ProtoField.uint32("ringblast.record.response_len", "Response length asked for"),
    ctl_len = ProtoField.uint32("ringblast.ctl.len", "Frame length (version, type, payload, seal)"),
    ctl_version = ProtoField.uint8("ringblast.ctl.version", "Control protocol version"),
    ctl_type = ProtoField.uint8("ringblast.ctl.type", "Message type", base.DEC, kinds),
    ctl_payload = ProtoField.string("ringblast.ctl.payload", "Payload (JSON)"),
    ctl_sealed = ProtoField.bool("ringblast.ctl.sealed", "Sealed"),
    ctl_seal_seq = ProtoField.uint64("ringblast.ctl.seal.seq", "Seal sequence number"),
    ctl_seal_tag = ProtoField.bytes("ringblast.ctl.seal.tag", "Seal tag (HMAC-SHA256, not checked)"),
}
rb.fields = {
    f.magic, f.form, f.version, f.flags, f.flag_record, f.flag_response, f.flag_request,
    f.flag_ack, f.failed, f.flow, f.epoch, f.seq, f.seq_low, f.timestamp, f.segment,
    f.segments, f.payload, f.gap_missing, f.repeat_of, f.late, f.rec_len, f.rec_response_len,
    f.ctl_len, f.ctl_version, f.ctl_type, f.ctl_payload, f.ctl_sealed, f.ctl_seal_seq,
    f.ctl_seal_tag,
}

local ex = {
    gap = ProtoExpert.new("ringblast.expert.gap", "Gap: packets missing", expert.group.SEQUENCE,
        expert.severity.WARN),
    rep = ProtoExpert.new("ringblast.expert.repeat", "Repeat: a duplicate", expert.group.SEQUENCE,
        expert.severity.WARN),
    late = ProtoExpert.new("ringblast.expert.late", "Late: fills an earlier gap",
        expert.group.SEQUENCE, expert.severity.NOTE),
    malformed = ProtoExpert.new("ringblast.expert.malformed", "Malformed ringblast data",
        expert.group.MALFORMED, expert.severity.ERROR),
}
rb.experts = { ex.gap, ex.rep, ex.late, ex.malformed }

rb.prefs.port = Pref.uint("Port", 9900, "The sink's port: UDP datagrams and TCP (records, control channel)")
rb.prefs.split_gso = Pref.bool("Split GSO super-datagrams", true,
    "Decode a datagram that holds several ringblast headers at a fixed stride as that many segments")

-- Per-flow accounting, filled on the first pass and read on every pass.
local flows = {}   -- "src|epoch|flow" -> { highest = n, seen = { [seq] = frame } }
local marks = {}   -- "frame:segment" -> { seq = n, missing = n, repeat_of = frame, late = bool }

function rb.init()
    flows = {}
    marks = {}
end

-- The 64-bit number whose low 32 bits are `low`, nearest to `reference` (src/proto/header.rs
-- extend_seq). Lua numbers are doubles: exact below 2^53, far beyond any run's sequence.
local function extend_seq(reference, low)
    local candidate = reference - (reference % SPAN) + low
    if candidate + SPAN / 2 < reference then
        return candidate + SPAN
    elseif candidate > reference + SPAN / 2 and candidate >= SPAN then
        return candidate - SPAN
    end
    return candidate
end

-- Accounts one header on the first pass; returns its mark on every pass.
local function account(pinfo, segment, epoch, flow, seq, low_only)
    local id = pinfo.number .. ":" .. segment
    local mark = marks[id]
    if mark or pinfo.visited then
        return mark
    end
    local key = tostring(pinfo.src) .. "|" .. epoch .. "|" .. flow
    local state = flows[key]
    if low_only then
        seq = extend_seq(state and state.highest or 0, seq)
    end
    mark = { seq = seq }
    if not state then
        flows[key] = { highest = seq, seen = { [seq] = pinfo.number } }
    elseif state.seen[seq] then
        mark.repeat_of = state.seen[seq]
    else
        state.seen[seq] = pinfo.number
        if seq > state.highest + 1 then
            mark.missing = seq - state.highest - 1
        elseif seq < state.highest then
            mark.late = true
        end
        if seq > state.highest then
            state.highest = seq
        end
    end
    marks[id] = mark
    return mark
end

local function add_marks(tree, mark)
    if not mark then
        return
    end
    if mark.missing then
        tree:add(f.gap_missing, UInt64(mark.missing)):set_generated()
        tree:add_proto_expert_info(ex.gap, string.format("Gap: %d missing before sequence number %d",
            mark.missing, mark.seq))
    end
    if mark.repeat_of then
        tree:add(f.repeat_of, mark.repeat_of):set_generated()
        tree:add_proto_expert_info(ex.rep, string.format("Repeat of sequence number %d (first in frame %d)",
            mark.seq, mark.repeat_of))
    end
    if mark.late then
        tree:add(f.late, true):set_generated()
        tree:add_proto_expert_info(ex.late)
    end
end

local function timestamp(range)
    local ns = range:uint64()
    local secs = (ns / 1000000000):tonumber()
    local nsecs = (ns % 1000000000):tonumber()
    return NSTime.new(secs, nsecs)
end

-- Which header form starts `tvb` at `offset` with `len` bytes: "full", "compact" or nil.
local function header_form(tvb, offset, len)
    if len < COMPACT_LEN then
        return nil
    end
    local magic = tvb(offset, 4):uint()
    if magic == COMPACT_MAGIC then
        return "compact"
    end
    if magic == MAGIC and len >= HEADER_LEN and tvb(offset + 4, 1):uint() == VERSION then
        return "full"
    end
    return nil
end

-- One datagram (or one GSO segment): its header and payload; returns a summary for the Info
-- column.
local function dissect_datagram(tvb, offset, len, pinfo, tree, segment)
    local form = header_form(tvb, offset, len)
    local sub = tree:add(rb, tvb(offset, len))
    local flow, epoch, seq, mark
    if form == "compact" then
        sub:append_text(", compact header")
        sub:add(f.magic, tvb(offset, 4))
        sub:add(f.form, 1):set_generated()
        sub:add(f.failed, tvb(offset + 4, 4))
        sub:add(f.flow, tvb(offset + 8, 2))
        sub:add(f.epoch, tvb(offset + 10, 4))
        sub:add(f.seq_low, tvb(offset + 14, 4))
        flow, epoch = tvb(offset + 8, 2):uint(), tvb(offset + 10, 4):uint()
        mark = account(pinfo, segment, epoch, flow, tvb(offset + 14, 4):uint(), true)
        sub:add(f.seq, UInt64(mark.seq)):set_generated()
        if len > COMPACT_LEN then
            sub:add(f.payload, tvb(offset + COMPACT_LEN, len - COMPACT_LEN))
        end
    else
        sub:add(f.magic, tvb(offset, 4))
        sub:add(f.form, 0):set_generated()
        sub:add(f.version, tvb(offset + 4, 1))
        sub:add(f.flags, tvb(offset + 5, 1))
        sub:add(f.failed, tvb(offset + 6, 4))
        sub:add(f.flow, tvb(offset + 10, 2))
        sub:add(f.epoch, tvb(offset + 12, 4))
        sub:add(f.seq, tvb(offset + 16, 8))
        sub:add(f.timestamp, tvb(offset + 24, 8), timestamp(tvb(offset + 24, 8)))
        flow, epoch = tvb(offset + 10, 2):uint(), tvb(offset + 12, 4):uint()
        mark = account(pinfo, segment, epoch, flow, tvb(offset + 16, 8):uint64():tonumber(), false)
        if len > HEADER_LEN then
            sub:add(f.payload, tvb(offset + HEADER_LEN, len - HEADER_LEN))
        end
    end
    if segment > 0 then
        sub:add(f.segment, segment):set_generated()
    end
    sub:append_text(string.format(", flow %d, epoch %08x, seq %d", flow, epoch, mark.seq))
    add_marks(sub, mark)
    local info = string.format("flow %d seq %d", flow, mark.seq)
    if mark.missing then
        info = info .. string.format(" [gap: %d missing]", mark.missing)
    end
    if mark.repeat_of then
        info = info .. " [repeat]"
    end
    return info
end

-- The stride of a GSO super-datagram: the length of its first segment when the same header
-- magic, flow and epoch repeat at every multiple of it (the last segment may be shorter), or nil.
local function gso_stride(tvb, form)
    local len = tvb:len()
    local hlen = form == "compact" and COMPACT_LEN or HEADER_LEN
    if len < 2 * hlen then
        return nil
    end
    local id_at, id_len = form == "compact" and 8 or 10, 6 -- flow and epoch
    local magic, id = tvb(0, 4):bytes(), tvb(id_at, id_len):bytes()
    for stride = hlen, len - hlen do
        if tvb(stride, 4):bytes() == magic and tvb(stride + id_at, id_len):bytes() == id then
            local at = stride
            while at + hlen <= len and tvb(at, 4):bytes() == magic and tvb(at + id_at, id_len):bytes() == id do
                at = at + stride
            end
            if at >= len then
                return stride
            end
            return nil
        end
    end
    return nil
end

local function dissect_udp(tvb, pinfo, tree)
    local form = header_form(tvb, 0, tvb:len())
    if not form then
        return 0
    end
    pinfo.cols.protocol = "ringblast"
    local stride = rb.prefs.split_gso and gso_stride(tvb, form) or nil
    if not stride then
        pinfo.cols.info = dissect_datagram(tvb, 0, tvb:len(), pinfo, tree, 0)
        return tvb:len()
    end
    local count = math.ceil(tvb:len() / stride)
    local info
    for i = 0, count - 1 do
        local at = i * stride
        local seg_info = dissect_datagram(tvb, at, math.min(stride, tvb:len() - at), pinfo, tree, i + 1)
        info = info or seg_info
    end
    tree:add(f.segments, count):set_generated()
    pinfo.cols.info = string.format("GSO, %d segments of %d bytes; first: %s", count, stride, info)
    return tvb:len()
end

-- TCP: a record ("RBLS" with the record flag) or a control frame (length-prefixed).
local function tcp_pdu_len(tvb, pinfo, offset)
    if tvb(offset, 4):uint() == MAGIC then
        if tvb:len() - offset < 10 then
            return -DESEGMENT_ONE_MORE_SEGMENT
        end
        local len = tvb(offset + 6, 4):uint()
        if len < HEADER_LEN or len > MAX_RECORD then
            return tvb:len() - offset
        end
        return len
    end
    local len = tvb(offset, 4):uint()
    if len < 2 or len > MAX_FRAME then
        return tvb:len() - offset
    end
    return 4 + len
end

local function dissect_record(tvb, pinfo, tree)
    local sub = tree:add(rb, tvb(), "ringblast TCP record")
    sub:add(f.magic, tvb(0, 4))
    sub:add(f.version, tvb(4, 1))
    local flags = sub:add(f.flags, tvb(5, 1))
    flags:add(f.flag_record, tvb(5, 1))
    flags:add(f.flag_response, tvb(5, 1))
    flags:add(f.flag_request, tvb(5, 1))
    flags:add(f.flag_ack, tvb(5, 1))
    sub:add(f.rec_len, tvb(6, 4))
    sub:add(f.flow, tvb(10, 2))
    sub:add(f.epoch, tvb(12, 4))
    sub:add(f.seq, tvb(16, 8))
    sub:add(f.timestamp, tvb(24, 8), timestamp(tvb(24, 8)))
    local body = HEADER_LEN
    if bit32.band(tvb(5, 1):uint(), FLAG_REQUEST) ~= 0 and tvb:len() >= HEADER_LEN + 4 then
        sub:add(f.rec_response_len, tvb(HEADER_LEN, 4))
        body = HEADER_LEN + 4
    end
    if tvb:len() > body then
        sub:add(f.payload, tvb(body))
    end
    pinfo.cols.info:append(string.format(" record flow %d seq %s", tvb(10, 2):uint(), tostring(tvb(16, 8):uint64())))
end

local function dissect_control(tvb, pinfo, tree)
    local sub = tree:add(rb, tvb(), "ringblast control frame")
    sub:add(f.ctl_len, tvb(0, 4))
    local version, kind = tvb(4, 1):uint(), tvb(5, 1):uint()
    sub:add(f.ctl_version, tvb(4, 1))
    sub:add(f.ctl_type, tvb(5, 1))
    local name = kinds[kind] or "unknown type"
    if not CONTROL_VERSIONS[version] or not kinds[kind] then
        sub:add_proto_expert_info(ex.malformed, string.format("Unknown version %d or message type %d", version, kind))
    end
    local body_len = tvb:len() - 6
    -- A sealed frame (version 4 with a secret, after the handshake) ends with an 8-byte sequence
    -- number and a 32-byte tag after its JSON object: the object closes just before the seal,
    -- and the sequence number's top bytes are zero (JSON text holds no NUL byte).
    local sealed = version >= 4 and body_len > SEAL_LEN
        and tvb(6 + body_len - SEAL_LEN - 1, 1):uint() == 0x7D
        and tvb(6 + body_len - SEAL_LEN, 4):uint() == 0
    local payload_len = sealed and body_len - SEAL_LEN or body_len
    if payload_len > 0 then
        sub:add(f.ctl_payload, tvb(6, payload_len))
    end
    sub:add(f.ctl_sealed, sealed):set_generated()
    if sealed then
        local seal_at = 6 + payload_len
        sub:add(f.ctl_seal_seq, tvb(seal_at, 8))
        sub:add(f.ctl_seal_tag, tvb(seal_at + 8, 32))
    end
    sub:append_text(string.format(": %s (v%d%s)", name, version, sealed and ", sealed" or ""))
    pinfo.cols.info:append(string.format(" %s%s", name, sealed and " (sealed)" or ""))
end

local function dissect_tcp_pdu(tvb, pinfo, tree)
    pinfo.cols.protocol = "ringblast"
    if tvb(0, 4):uint() == MAGIC and tvb:len() >= HEADER_LEN
        and bit32.band(tvb(5, 1):uint(), FLAG_RECORD) ~= 0 then
        dissect_record(tvb, pinfo, tree)
    elseif tvb:len() >= 6 then
        dissect_control(tvb, pinfo, tree)
    else
        tree:add(rb, tvb()):add_proto_expert_info(ex.malformed, "Runt frame")
    end
    return tvb:len()
end

local function dissect_tcp(tvb, pinfo, tree)
    pinfo.cols.info:clear()
    dissect_tcp_pdus(tvb, tree, 4, tcp_pdu_len, dissect_tcp_pdu, true)
    return tvb:len()
end

-- Wireshark's port types: 2 is TCP, 3 is UDP.
local PT_TCP = 2

function rb.dissector(tvb, pinfo, tree)
    if pinfo.port_type == PT_TCP then
        return dissect_tcp(tvb, pinfo, tree)
    end
    return dissect_udp(tvb, pinfo, tree)
end

local function heuristic_udp(tvb, pinfo, tree)
    if not header_form(tvb, 0, tvb:len()) then
        return false
    end
    dissect_udp(tvb, pinfo, tree)
    return true
end

-- A control connection opens with a ClientHello: a length the cap allows, version 1 to 10,
-- type 1 and a JSON object. Seen once, the connection's server port is decoded as ringblast.
local function heuristic_tcp(tvb, pinfo, tree)
    if tvb:len() < 7 then
        return false
    end
    local record = tvb(0, 4):uint() == MAGIC and tvb:len() >= 6 and tvb(4, 1):uint() == VERSION
        and bit32.band(tvb(5, 1):uint(), FLAG_RECORD) ~= 0
    local hello = tvb(0, 4):uint() <= MAX_FRAME and CONTROL_VERSIONS[tvb(4, 1):uint()]
        and tvb(5, 1):uint() == 1 and tvb(6, 1):uint() == 0x7B
    if not (record or hello) then
        return false
    end
    DissectorTable.get("tcp.port"):add(pinfo.dst_port, rb)
    dissect_tcp(tvb, pinfo, tree)
    return true
end

local registered_port
local function register_port()
    local udp, tcp = DissectorTable.get("udp.port"), DissectorTable.get("tcp.port")
    if registered_port then
        udp:remove(registered_port, rb)
        tcp:remove(registered_port, rb)
    end
    registered_port = rb.prefs.port
    if registered_port > 0 then
        udp:add(registered_port, rb)
        tcp:add(registered_port, rb)
    end
end

function rb.prefs_changed()
    register_port()
end

register_port()
rb:register_heuristic("udp", heuristic_udp)
rb:register_heuristic("tcp", heuristic_tcp)
