-- Wireshark dissector for the aggswitch aggregation protocol, version 2
-- (docs/protocol.md; the C++ parser and builder are aggregator/wire.h), and for
-- aggswitch's in-band network telemetry (docs/telemetry.md; at the end of this file).
--
--   wireshark -X lua_script:tools/wireshark/aggswitch.lua capture.pcap
--   tshark -X lua_script:tools/wireshark/aggswitch.lua -r capture.pcap -Y 'aggswitch.opcode == 3'
--
-- Decodes UDP port 47000 and, heuristically, any UDP payload that starts with
-- magic 0xA65C and version 2. Every header field, the missing list and the
-- little-endian payload elements get a filterable field under `aggswitch.`.
-- A malformed datagram gets an expert error; the dissector never raises a Lua
-- error on packet contents. Written for the Lua API of Wireshark 4.0 (Lua 5.2)
-- and uses no bit library, so it also loads on Lua 5.3/5.4 builds.

local AGG_PORT = 47000
local AGG_MAGIC = 0xA65C
local AGG_VERSION = 2
local HEADER_LEN = 52

local aggswitch = Proto("aggswitch", "aggswitch In-Network Aggregation Protocol")

-- Tables of docs/protocol.md ------------------------------------------------

local OPCODE = { CONTRIBUTION = 1, PARTIAL = 2, RESULT = 3, LATE = 4, VERIFY = 5,
                 EXCEPTION_RETRANSMIT = 6, TASK_INFO = 7, ACK = 8, NACK = 9,
                 NOTICE = 10, QUERY = 11, DISTRIBUTE = 12, FETCH = 13 }
local opcode_names = {}
for name, value in pairs(OPCODE) do opcode_names[value] = name end

local notice_names = {
  [1] = "flag your data for bypass",
  [2] = "stop flagging your data",
  [3] = "held, waiting for other members",
  [4] = "missing: send it",
  [5] = "relocated to the spare slot in slot_hint",
}

local nack_reason_names = {
  [1] = "unknown job",
  [2] = "key mismatch",
  [3] = "malformed",
  [4] = "job table full",
  [5] = "dtype/op differs from the job's",
  [6] = "task info conflicts with the job's",
  [7] = "rate limited",
  [8] = "in-band jobs full",
  [9] = "slot quota",
  [10] = "hold quota",
  [11] = "member bound to another address",
  [12] = "no upstream for a multi-node job",
  [13] = "addr_low differs within the chunk",
  [14] = "slot busy, no spare slot free",
  [15] = "no parameter node for AGGREGATE_AT_PS data",
  [16] = "a member has no address yet (DISTRIBUTE)",
  [17] = "not the job's main server (DISTRIBUTE)",
  [18] = "store full",
  [19] = "not stored (FETCH)",
  [20] = "new run: the switch starts it",
  [21] = "the datagram's run has ended",
  [22] = "result lost: reduced again it would round otherwise",
}

-- size: bytes per element; numeric: sum/min/max allowed; logical: and/or allowed.
local DTYPES = {
  [0] = { name = "int32",    size = 4, numeric = true,  logical = true },
  [1] = { name = "float32",  size = 4, numeric = true,  logical = false },
  [2] = { name = "float16",  size = 2, numeric = true,  logical = false },
  [3] = { name = "bfloat16", size = 2, numeric = true,  logical = false },
  [4] = { name = "bool",     size = 1, numeric = false, logical = true },
}
local dtype_names = {}
for value, t in pairs(DTYPES) do dtype_names[value] = t.name end

local op_names = { [0] = "sum", [1] = "min", [2] = "max", [3] = "and", [4] = "or" }
local OP_IS_LOGICAL = { [0] = false, [1] = false, [2] = false, [3] = true, [4] = true }

-- Bit, field name and label of each flag, in bit order.
local FLAG_BITS = {
  { mask = 0x0001, abbr = "aggregate_at_ps", label = "AGGREGATE_AT_PS" },
  { mask = 0x0002, abbr = "retransmission",  label = "RETRANSMISSION" },
  { mask = 0x0004, abbr = "conflict",        label = "CONFLICT" },
  { mask = 0x0008, abbr = "verified",        label = "VERIFIED" },
  { mask = 0x0010, abbr = "bypass",          label = "BYPASS" },
  { mask = 0x0020, abbr = "overflow",        label = "OVERFLOW" },
  { mask = 0x0040, abbr = "incomplete",      label = "INCOMPLETE" },
  { mask = 0x0080, abbr = "task_info",       label = "TASK_INFO" },
  { mask = 0x0100, abbr = "ordered",         label = "ORDERED" },
  { mask = 0x0200, abbr = "verify_mode",     label = "VERIFY_MODE" },
  { mask = 0x0400, abbr = "release",         label = "RELEASE" },
  { mask = 0x0800, abbr = "final",           label = "FINAL" },
  { mask = 0x1000, abbr = "content",         label = "CONTENT" },
  { mask = 0x2000, abbr = "run_id",          label = "RUN_ID" },
  { mask = 0x4000, abbr = "recovered",       label = "RECOVERED" },
}
-- Bit 15 is reserved: a flags value at or above this has it set.
local FLAGS_RESERVED_MIN = 0x8000
local NO_SLOT_HINT = 0xFFFF
local MOVED_SLOT_HINT = 0xFFFE  -- the job's moved partition

-- Fields -----------------------------------------------------------------------

-- Every field in header order: abbreviation suffix, then the ProtoField.
local pf = {}
local fields = {}
local function field(key, f)
  pf[key] = f
  fields[#fields + 1] = f
end
field("magic", ProtoField.uint16("aggswitch.magic", "Magic", base.HEX))
field("version", ProtoField.uint8("aggswitch.version", "Version", base.DEC))
field("opcode", ProtoField.uint8("aggswitch.opcode", "Opcode", base.DEC, opcode_names))
field("flags", ProtoField.uint16("aggswitch.flags", "Flags", base.HEX))
local pf_flag = {}
for i, bit in ipairs(FLAG_BITS) do
  pf_flag[i] = ProtoField.bool("aggswitch.flags." .. bit.abbr, bit.label, 16, nil, bit.mask)
  fields[#fields + 1] = pf_flag[i]
end
field("node_id", ProtoField.uint16("aggswitch.node_id", "Node id", base.DEC))
field("job_id", ProtoField.uint32("aggswitch.job_id", "Job id", base.DEC))
field("seq", ProtoField.uint32("aggswitch.seq", "Sequence number", base.DEC))
field("job_key", ProtoField.uint64("aggswitch.job_key", "Job key", base.HEX))
field("ack_watermark", ProtoField.uint32("aggswitch.ack_watermark", "ACK watermark", base.DEC))
field("addr_low", ProtoField.uint32("aggswitch.addr_low", "Buffer address (low bits)", base.HEX))
field("expected", ProtoField.uint16("aggswitch.expected", "Expected members", base.DEC))
field("node_count", ProtoField.uint16("aggswitch.node_count", "Node count", base.DEC))
field("slot_hint", ProtoField.uint16("aggswitch.slot_hint", "Slot hint", base.DEC))
field("elem_count", ProtoField.uint16("aggswitch.elem_count", "Element count", base.DEC))
field("dtype", ProtoField.uint8("aggswitch.dtype", "Data type", base.DEC, dtype_names))
field("op", ProtoField.uint8("aggswitch.op", "Operation", base.DEC, op_names))
field("scale", ProtoField.int8("aggswitch.scale", "Scale", base.DEC))
field("missing_count", ProtoField.uint8("aggswitch.missing_count", "Missing count", base.DEC))
field("aux", ProtoField.uint32("aggswitch.aux", "Aux", base.DEC))
field("incarnation", ProtoField.uint32("aggswitch.incarnation", "Incarnation", base.HEX))
field("missing", ProtoField.bytes("aggswitch.missing", "Missing list"))
field("missing_node", ProtoField.uint16("aggswitch.missing.node", "Missing node", base.DEC))
field("payload", ProtoField.bytes("aggswitch.payload", "Payload"))
field("elem_int32", ProtoField.int32("aggswitch.elem.int32", "int32", base.DEC))
field("elem_float32", ProtoField.float("aggswitch.elem.float32", "float32"))
field("elem_float16", ProtoField.float("aggswitch.elem.float16", "float16"))
field("elem_bfloat16", ProtoField.float("aggswitch.elem.bfloat16", "bfloat16"))
field("elem_bool", ProtoField.bool("aggswitch.elem.bool", "bool", base.NONE))
aggswitch.fields = fields

local ef = {
  malformed = ProtoExpert.new("aggswitch.expert.malformed", "Malformed aggswitch datagram",
                              expert.group.MALFORMED, expert.severity.ERROR),
  reserved  = ProtoExpert.new("aggswitch.expert.reserved_flags", "Reserved flag bits set",
                              expert.group.PROTOCOL, expert.severity.WARN),
  trailing  = ProtoExpert.new("aggswitch.expert.trailing", "Bytes after the payload",
                              expert.group.PROTOCOL, expert.severity.NOTE),
}
aggswitch.experts = { ef.malformed, ef.reserved, ef.trailing }

-- Helpers ----------------------------------------------------------------------

local function has_bit(value, mask)
  return math.floor(value / mask) % 2 == 1
end

-- IEEE 754 binary16 bits to a Lua number (exact; subnormals, inf and NaN included).
local function half_to_number(h)
  local sign = has_bit(h, 0x8000) and -1 or 1
  local exp = math.floor(h / 0x400) % 0x20
  local mant = h % 0x400
  if exp == 0 then return sign * mant * 2 ^ -24 end
  if exp == 0x1F then
    if mant == 0 then return sign * math.huge end
    return 0 / 0
  end
  return sign * (1 + mant / 0x400) * 2 ^ (exp - 15)
end

-- bfloat16 bits (the top half of a binary32) to a Lua number.
local function bfloat16_to_number(b)
  local sign = has_bit(b, 0x8000) and -1 or 1
  local exp = math.floor(b / 0x80) % 0x100
  local mant = b % 0x80
  if exp == 0 then return sign * mant * 2 ^ -133 end
  if exp == 0xFF then
    if mant == 0 then return sign * math.huge end
    return 0 / 0
  end
  return sign * (1 + mant / 0x80) * 2 ^ (exp - 127)
end

local function name_or_unknown(names, value)
  return names[value] or string.format("unknown (%d)", value)
end

local function flag_labels(flags)
  local set = {}
  for _, bit in ipairs(FLAG_BITS) do
    if has_bit(flags, bit.mask) then set[#set + 1] = bit.label end
  end
  return table.concat(set, ",")
end

-- Dissection ---------------------------------------------------------------------

-- Adds one error to `item` and the Info column; returns the datagram length so
-- the caller can `return malformed(...)`.
local function malformed(item, pinfo, len, text)
  item:add_proto_expert_info(ef.malformed, text)
  pinfo.cols.info:append(" [Malformed: " .. text .. "]")
  return len
end

local function add_elements(payload_tree, tvb, offset, count, dtype)
  for i = 0, count - 1 do
    local item
    if dtype == 0 then
      item = payload_tree:add_le(pf.elem_int32, tvb(offset, 4))
    elseif dtype == 1 then
      item = payload_tree:add_le(pf.elem_float32, tvb(offset, 4))
    elseif dtype == 2 then
      local r = tvb(offset, 2)
      item = payload_tree:add(pf.elem_float16, r, half_to_number(r:le_uint()))
    elseif dtype == 3 then
      local r = tvb(offset, 2)
      item = payload_tree:add(pf.elem_bfloat16, r, bfloat16_to_number(r:le_uint()))
    else
      item = payload_tree:add(pf.elem_bool, tvb(offset, 1))
    end
    item:prepend_text(string.format("[%d] ", i))
    offset = offset + DTYPES[dtype].size
  end
end

local function dissect(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "AGGSWITCH"
  local root = tree:add(aggswitch, tvb())

  if len < HEADER_LEN then
    pinfo.cols.info:set("aggswitch")
    return malformed(root, pinfo, len,
                     string.format("%d bytes, shorter than the 52-byte header", len))
  end

  local magic = tvb(0, 2):uint()
  local version = tvb(2, 1):uint()
  local opcode = tvb(3, 1):uint()
  local flags = tvb(4, 2):uint()
  local node_id = tvb(6, 2):uint()
  local job_id = tvb(8, 4):uint()
  local seq = tvb(12, 4):uint()
  local ack_watermark = tvb(24, 4):uint()
  local slot_hint = tvb(36, 2):uint()
  local elem_count = tvb(38, 2):uint()
  local dtype = tvb(40, 1):uint()
  local op = tvb(41, 1):uint()
  local scale = tvb(42, 1):int()
  local missing_count = tvb(43, 1):uint()
  local aux = tvb(44, 4):uint()
  local dt = DTYPES[dtype]

  local info = string.format("%s job=%d seq=%d node=%d", name_or_unknown(opcode_names, opcode),
                             job_id, seq, node_id)
  if elem_count > 0 then
    info = info .. string.format(" %sx%d", dt and dt.name or "dtype?", elem_count)
  end
  if opcode == OPCODE.ACK then info = info .. string.format(" ack=%d", ack_watermark) end
  if opcode == OPCODE.NACK then
    info = info .. " reason=" .. name_or_unknown(nack_reason_names, aux)
  end
  if opcode == OPCODE.NOTICE then
    info = info .. " notice=" .. name_or_unknown(notice_names, aux)
  end
  if missing_count > 0 then info = info .. string.format(" missing=%d", missing_count) end
  local labels = flag_labels(flags)
  if labels ~= "" then info = info .. " [" .. labels .. "]" end
  pinfo.cols.info:set(info)
  root:append_text(", " .. info)

  local header = root:add(tvb(0, HEADER_LEN), "Header")
  local magic_item = header:add(pf.magic, tvb(0, 2))
  local version_item = header:add(pf.version, tvb(2, 1))
  local opcode_item = header:add(pf.opcode, tvb(3, 1))
  local flags_item = header:add(pf.flags, tvb(4, 2))
  if labels ~= "" then flags_item:append_text(" (" .. labels .. ")") end
  for _, f in ipairs(pf_flag) do flags_item:add(f, tvb(4, 2)) end
  header:add(pf.node_id, tvb(6, 2))
  header:add(pf.job_id, tvb(8, 4))
  header:add(pf.seq, tvb(12, 4))
  header:add(pf.job_key, tvb(16, 8))
  header:add(pf.ack_watermark, tvb(24, 4))
  header:add(pf.addr_low, tvb(28, 4))
  header:add(pf.expected, tvb(32, 2))
  header:add(pf.node_count, tvb(34, 2))
  local slot_item = header:add(pf.slot_hint, tvb(36, 2))
  if slot_hint == NO_SLOT_HINT then slot_item:append_text(" (none)") end
  if slot_hint == MOVED_SLOT_HINT then slot_item:append_text(" (the job's moved partition)") end
  header:add(pf.elem_count, tvb(38, 2))
  local dtype_item = header:add(pf.dtype, tvb(40, 1))
  local op_item = header:add(pf.op, tvb(41, 1))
  local scale_item = header:add(pf.scale, tvb(42, 1))
  if dtype == 0 then scale_item:append_text(string.format(" (value = integer x 2^%d)", scale)) end
  header:add(pf.missing_count, tvb(43, 1))
  local aux_item = header:add(pf.aux, tvb(44, 4))
  if opcode == OPCODE.NACK then
    aux_item:set_text(string.format("NACK reason: %s (%d)",
                                    name_or_unknown(nack_reason_names, aux), aux))
  elseif opcode == OPCODE.NOTICE then
    aux_item:set_text(string.format("NOTICE: %s (%d)", name_or_unknown(notice_names, aux), aux))
  end
  header:add(pf.incarnation, tvb(48, 4))

  if magic ~= AGG_MAGIC then
    return malformed(magic_item, pinfo, len, string.format("magic 0x%04X is not 0xA65C", magic))
  end
  if version ~= AGG_VERSION then
    return malformed(version_item, pinfo, len, string.format("version %d is not 2", version))
  end
  if not opcode_names[opcode] then
    return malformed(opcode_item, pinfo, len, string.format("opcode %d outside 1..13", opcode))
  end
  if not dt then
    return malformed(dtype_item, pinfo, len, string.format("dtype %d outside the table", dtype))
  end
  if not op_names[op] then
    return malformed(op_item, pinfo, len, string.format("op %d outside the table", op))
  end
  if elem_count > 0 then
    local allowed
    if OP_IS_LOGICAL[op] then allowed = dt.logical else allowed = dt.numeric end
    if not allowed then
      return malformed(op_item, pinfo, len, string.format("dtype %s does not allow op %s",
                                                          dt.name, op_names[op]))
    end
  end
  if flags >= FLAGS_RESERVED_MIN then
    flags_item:add_proto_expert_info(ef.reserved, string.format(
        "Reserved flag bits set (0x%04X); receivers ignore them", flags - flags % FLAGS_RESERVED_MIN))
  end

  local missing_len = 2 * missing_count
  local payload_len = elem_count * dt.size
  local needed = HEADER_LEN + missing_len + payload_len
  if needed > len then
    return malformed(root, pinfo, len, string.format(
        "missing list and payload need %d bytes, the datagram has %d", needed, len))
  end

  local offset = HEADER_LEN
  if missing_count > 0 then
    local missing_tree = root:add(pf.missing, tvb(offset, missing_len))
    if flags % 0x2000 >= 0x1000 then
      -- CONTENT: the list names the nodes whose data the payload holds.
      missing_tree:set_text(string.format("Content list (%d nodes, CONTENT)", missing_count))
    else
      missing_tree:set_text(string.format("Missing list (%d nodes)", missing_count))
    end
    for _ = 1, missing_count do
      missing_tree:add(pf.missing_node, tvb(offset, 2))
      offset = offset + 2
    end
  end
  if payload_len > 0 then
    local payload_tree = root:add(pf.payload, tvb(offset, payload_len))
    payload_tree:set_text(string.format("Payload: %d x %s, little-endian (%d bytes)",
                                        elem_count, dt.name, payload_len))
    add_elements(payload_tree, tvb, offset, elem_count, dtype)
    offset = offset + payload_len
  end
  if offset < len then
    root:add_tvb_expert_info(ef.trailing, tvb(offset),
                             string.format("%d bytes after the payload, ignored", len - offset))
  end
  return len
end

function aggswitch.dissector(tvb, pinfo, tree)
  return dissect(tvb, pinfo, tree)
end

-- Datagrams to the switch's aggregation address on another port: accepted when
-- they start with the magic and version 2.
local function heuristic(tvb, pinfo, tree)
  if tvb:len() < 4 then return false end
  if tvb(0, 2):uint() ~= AGG_MAGIC or tvb(2, 1):uint() ~= AGG_VERSION then return false end
  dissect(tvb, pinfo, tree)
  return true
end

DissectorTable.get("udp.port"):add(AGG_PORT, aggswitch)
aggswitch:register_heuristic("udp", heuristic)

-- In-band network telemetry (docs/telemetry.md; the C++ builder and parser
-- are telemetry/int_wire.h) ---------------------------------------------------
--
-- aggswitch_int: INT-MD over UDP (INT 2.1) on UDP port 7700 (the switch's
-- default INT port) or any UDP payload that starts like one of aggswitch's
-- (INT-MD, NPT 1, version 2, domain 0x4147): the shim, the INT-MD header,
-- each hop's metadata and the path id, then the original payload handed to
-- the dissector of the original destination port (aggswitch for 47000).
--
-- aggswitch_report: Telemetry Report v2.0 on UDP port 32766 (agg-intcollector's
-- default) or any UDP payload that starts like one of aggswitch's: the group
-- header, the INT individual report with aggswitch's path id and hop index,
-- and the datagram's IPv4 and UDP headers inside, handed to the IP dissector.

local INT_PORT = 7700
local REPORT_PORT = 32766
local INT_DOMAIN = 0x4147

local int_proto = Proto("aggswitch_int", "aggswitch In-band Network Telemetry (INT-MD over UDP)")
local report_proto = Proto("aggswitch_report", "aggswitch Telemetry Report (v2.0)")

-- The metadata a hop records, in instruction bit order (bit 0 is 0x8000):
-- mask, field key and label; each is 4 bytes, bits 4-6 are 8 (unavailable).
local INT_BITS = {
  { mask = 0x8000, key = "node_id" },
  { mask = 0x4000, key = "ports" },
  { mask = 0x2000, key = "latency" },
  { mask = 0x1000, key = "queue" },
  { mask = 0x0800, key = "eight" },
  { mask = 0x0400, key = "eight" },
  { mask = 0x0200, key = "eight" },
  { mask = 0x0100, key = "tx_util" },
}
-- Bits 8-15 (buffer occupancy, reserved, checksum complement): 4 bytes each,
-- never recorded by aggswitch.
local OTHER_BITS = { 0x0080, 0x0040, 0x0020, 0x0010, 0x0008, 0x0004, 0x0002, 0x0001 }

local ipf = {}
local int_fields = {}
local function int_field(key, f)
  ipf[key] = f
  int_fields[#int_fields + 1] = f
end
int_field("type", ProtoField.uint8("aggswitch_int.type", "INT type", base.DEC, { [1] = "INT-MD" }, 0xF0))
int_field("npt", ProtoField.uint8("aggswitch_int.npt", "Next protocol type", base.DEC,
                                  { [1] = "UDP payload" }, 0x0C))
int_field("length", ProtoField.uint8("aggswitch_int.length", "Length (words)", base.DEC))
int_field("original_port", ProtoField.uint16("aggswitch_int.original_port", "Original destination port", base.DEC))
int_field("version", ProtoField.uint8("aggswitch_int.version", "Version", base.DEC, nil, 0xF0))
int_field("d", ProtoField.bool("aggswitch_int.d", "D (discard)", 8, nil, 0x08))
int_field("e", ProtoField.bool("aggswitch_int.e", "E (max hop count exceeded)", 8, nil, 0x04))
int_field("m", ProtoField.bool("aggswitch_int.m", "M (MTU exceeded)", 8, nil, 0x02))
int_field("hop_ml", ProtoField.uint8("aggswitch_int.hop_ml", "Hop metadata length (words)", base.DEC, nil, 0x1F))
int_field("remaining", ProtoField.uint8("aggswitch_int.remaining", "Remaining hop count", base.DEC))
int_field("instructions", ProtoField.uint16("aggswitch_int.instructions", "Instruction bitmap", base.HEX))
int_field("domain_id", ProtoField.uint16("aggswitch_int.domain_id", "Domain specific id", base.HEX))
int_field("ds_instructions", ProtoField.uint16("aggswitch_int.ds_instructions", "DS instruction", base.HEX))
int_field("ds_flags", ProtoField.uint16("aggswitch_int.ds_flags", "DS flags (hop budget)", base.DEC))
int_field("hop", ProtoField.bytes("aggswitch_int.hop", "Hop metadata"))
int_field("node_id", ProtoField.uint32("aggswitch_int.hop.node_id", "Node id", base.DEC))
int_field("ingress_port", ProtoField.uint16("aggswitch_int.hop.ingress_port", "Ingress port", base.DEC))
int_field("egress_port", ProtoField.uint16("aggswitch_int.hop.egress_port", "Egress port", base.DEC))
int_field("latency", ProtoField.uint32("aggswitch_int.hop.latency", "Hop latency (ns)", base.DEC))
int_field("queue_id", ProtoField.uint8("aggswitch_int.hop.queue_id", "Queue id", base.DEC))
int_field("queue_occupancy", ProtoField.uint24("aggswitch_int.hop.queue_occupancy", "Queue occupancy", base.DEC))
int_field("tx_util", ProtoField.uint32("aggswitch_int.hop.tx_utilization", "Egress TX utilisation (ppm)", base.DEC))
int_field("unavailable", ProtoField.bytes("aggswitch_int.hop.unavailable", "Metadata not recorded"))
int_field("source_node", ProtoField.uint32("aggswitch_int.path.source_node", "Path id: source node", base.DEC))
int_field("path_seq", ProtoField.uint32("aggswitch_int.path.seq", "Path id: sequence", base.DEC))
int_proto.fields = int_fields

local rpf = {}
local report_fields = {}
local function report_field(key, f)
  rpf[key] = f
  report_fields[#report_fields + 1] = f
end
report_field("version", ProtoField.uint8("aggswitch_report.version", "Version", base.DEC, nil, 0xF0))
report_field("hw_id", ProtoField.uint16("aggswitch_report.hw_id", "Hardware id", base.DEC, nil, 0x0FC0))
report_field("sequence", ProtoField.uint24("aggswitch_report.sequence", "Sequence number", base.DEC, nil, 0x3FFFFF))
report_field("node_id", ProtoField.uint32("aggswitch_report.node_id", "Node id", base.DEC))
report_field("rep_type", ProtoField.uint8("aggswitch_report.rep_type", "Report type", base.DEC,
                                          { [0] = "inner only", [1] = "INT", [2] = "IOAM" }, 0xF0))
report_field("in_type", ProtoField.uint8("aggswitch_report.in_type", "Inner type", base.DEC,
                                         { [0] = "none", [1] = "TLV", [2] = "DS extension", [3] = "Ethernet",
                                           [4] = "IPv4", [5] = "IPv6" }, 0x0F))
report_field("report_length", ProtoField.uint8("aggswitch_report.report_length", "Report length (words)", base.DEC))
report_field("md_length", ProtoField.uint8("aggswitch_report.md_length", "Metadata length (words)", base.DEC))
report_field("d", ProtoField.bool("aggswitch_report.d", "D (dropped)", 8, nil, 0x80))
report_field("q", ProtoField.bool("aggswitch_report.q", "Q (congested queue)", 8, nil, 0x40))
report_field("f", ProtoField.bool("aggswitch_report.f", "F (tracked flow)", 8, nil, 0x20))
report_field("i", ProtoField.bool("aggswitch_report.i", "I (intermediate hop)", 8, nil, 0x10))
report_field("rep_md_bits", ProtoField.uint16("aggswitch_report.rep_md_bits", "RepMdBits", base.HEX))
report_field("domain_id", ProtoField.uint16("aggswitch_report.domain_id", "Domain specific id", base.HEX))
report_field("ds_md_bits", ProtoField.uint16("aggswitch_report.ds_md_bits", "DSMdBits", base.HEX))
report_field("ds_md_status", ProtoField.uint16("aggswitch_report.ds_md_status", "DSMdstatus", base.HEX))
report_field("ingress_port", ProtoField.uint16("aggswitch_report.ingress_port", "Ingress port", base.DEC))
report_field("egress_port", ProtoField.uint16("aggswitch_report.egress_port", "Egress port", base.DEC))
report_field("latency", ProtoField.uint32("aggswitch_report.latency", "Hop latency (ns)", base.DEC))
report_field("queue_id", ProtoField.uint8("aggswitch_report.queue_id", "Queue id", base.DEC))
report_field("queue_occupancy", ProtoField.uint24("aggswitch_report.queue_occupancy", "Queue occupancy", base.DEC))
report_field("tx_util", ProtoField.uint32("aggswitch_report.tx_utilization", "Egress TX utilisation (ppm)", base.DEC))
report_field("unavailable", ProtoField.bytes("aggswitch_report.unavailable", "Metadata not recorded"))
report_field("source_node", ProtoField.uint32("aggswitch_report.path.source_node", "Path id: source node", base.DEC))
report_field("path_seq", ProtoField.uint32("aggswitch_report.path.seq", "Path id: sequence", base.DEC))
report_field("hop_index", ProtoField.uint32("aggswitch_report.hop_index", "Hop index", base.DEC))
report_proto.fields = report_fields

local int_malformed = ProtoExpert.new("aggswitch_int.expert.malformed", "Malformed INT headers",
                                      expert.group.MALFORMED, expert.severity.ERROR)
int_proto.experts = { int_malformed }
local report_malformed = ProtoExpert.new("aggswitch_report.expert.malformed", "Malformed Telemetry Report",
                                         expert.group.MALFORMED, expert.severity.ERROR)
report_proto.experts = { report_malformed }

local function telemetry_malformed(expert_field, item, pinfo, len, text)
  item:add_proto_expert_info(expert_field, text)
  pinfo.cols.info:append(" [Malformed: " .. text .. "]")
  return len
end

-- Words of metadata an instruction bitmap asks for.
local function metadata_words(bits)
  local words = 0
  for _, b in ipairs(INT_BITS) do
    if has_bit(bits, b.mask) then
      words = words + ((b.key == "eight") and 2 or 1)
    end
  end
  for _, mask in ipairs(OTHER_BITS) do
    if has_bit(bits, mask) then words = words + 1 end
  end
  return words
end

-- Adds the metadata `bits` asks for at `offset` to `tree` with the field
-- table `f`; returns the offset after it. `with_node`: bit 0 is present
-- (hop metadata; a report's node id is in its group header).
local function add_metadata(tree, tvb, offset, bits, f, with_node)
  for _, b in ipairs(INT_BITS) do
    if has_bit(bits, b.mask) and (with_node or b.key ~= "node_id") then
      if b.key == "node_id" then
        tree:add(f.node_id, tvb(offset, 4))
        offset = offset + 4
      elseif b.key == "ports" then
        tree:add(f.ingress_port, tvb(offset, 2))
        tree:add(f.egress_port, tvb(offset + 2, 2))
        offset = offset + 4
      elseif b.key == "latency" then
        tree:add(f.latency, tvb(offset, 4))
        offset = offset + 4
      elseif b.key == "queue" then
        tree:add(f.queue_id, tvb(offset, 1))
        tree:add(f.queue_occupancy, tvb(offset + 1, 3))
        offset = offset + 4
      elseif b.key == "tx_util" then
        tree:add(f.tx_util, tvb(offset, 4))
        offset = offset + 4
      else
        tree:add(f.unavailable, tvb(offset, 8))
        offset = offset + 8
      end
    end
  end
  for _, mask in ipairs(OTHER_BITS) do
    if has_bit(bits, mask) then
      tree:add(f.unavailable, tvb(offset, 4))
      offset = offset + 4
    end
  end
  return offset
end

local function dissect_int(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "aggswitch INT"
  local root = tree:add(int_proto, tvb(0, math.min(len, 16)))
  if len < 16 then
    return telemetry_malformed(int_malformed, root, pinfo, len, string.format(
        "%d bytes: shorter than the shim and INT-MD header (16)", len))
  end
  root:add(ipf.type, tvb(0, 1))
  root:add(ipf.npt, tvb(0, 1))
  local length_item = root:add(ipf.length, tvb(1, 1))
  root:add(ipf.original_port, tvb(2, 2))
  root:add(ipf.version, tvb(4, 1))
  root:add(ipf.d, tvb(4, 1))
  root:add(ipf.e, tvb(4, 1))
  root:add(ipf.m, tvb(4, 1))
  local hop_ml_item = root:add(ipf.hop_ml, tvb(6, 1))
  root:add(ipf.remaining, tvb(7, 1))
  root:add(ipf.instructions, tvb(8, 2))
  root:add(ipf.domain_id, tvb(10, 2))
  root:add(ipf.ds_instructions, tvb(12, 2))
  root:add(ipf.ds_flags, tvb(14, 2))
  local int_bytes = tvb(1, 1):uint() * 4
  local original_port = tvb(2, 2):uint()
  local hop_ml = tvb(6, 1):uint() % 32
  local bits = tvb(8, 2):uint()
  if 4 + int_bytes > len or int_bytes < 20 then
    return telemetry_malformed(int_malformed, length_item, pinfo, len, string.format(
        "length %d words: the headers and path id need at least 5, the datagram has %d bytes",
        int_bytes / 4, len - 4))
  end
  local hop_bytes = int_bytes - 12 - 8
  if hop_ml == 0 or hop_bytes % (hop_ml * 4) ~= 0 then
    return telemetry_malformed(int_malformed, hop_ml_item, pinfo, len, string.format(
        "%d bytes of hop metadata are not whole hops of %d words", hop_bytes, hop_ml))
  end
  root:set_len(4 + int_bytes)
  local offset = 16
  local hops = 0
  while offset < 16 + hop_bytes do
    local hop_tree = root:add(ipf.hop, tvb(offset, hop_ml * 4))
    hops = hops + 1
    hop_tree:set_text(string.format("Hop metadata (the %s hop on top)", hops == 1 and "latest" or "next"))
    if metadata_words(bits) == hop_ml then add_metadata(hop_tree, tvb, offset, bits, ipf, true) end
    offset = offset + hop_ml * 4
  end
  root:add(ipf.source_node, tvb(offset, 4))
  root:add(ipf.path_seq, tvb(offset + 4, 4))
  offset = offset + 8
  pinfo.cols.info = string.format("INT path %d/%d, %d hop(s) of metadata, original port %d",
                                  tvb(offset - 8, 4):uint(), tvb(offset - 4, 4):uint(), hops, original_port)
  if offset < len then
    local payload = tvb(offset):tvb()
    if not DissectorTable.get("udp.port"):try(original_port, payload, pinfo, tree) then
      Dissector.get("data"):call(payload, pinfo, tree)
    end
  end
  return len
end

function int_proto.dissector(tvb, pinfo, tree)
  return dissect_int(tvb, pinfo, tree)
end

local function dissect_report(tvb, pinfo, tree)
  local len = tvb:len()
  pinfo.cols.protocol = "aggswitch Telemetry Report"
  local root = tree:add(report_proto, tvb(0, len))
  if len < 20 then
    return telemetry_malformed(report_malformed, root, pinfo, len, string.format(
        "%d bytes: shorter than the group, report and INT headers (20)", len))
  end
  root:add(rpf.version, tvb(0, 1))
  root:add(rpf.hw_id, tvb(0, 2))
  root:add(rpf.sequence, tvb(1, 3))
  root:add(rpf.node_id, tvb(4, 4))
  local type_item = root:add(rpf.rep_type, tvb(8, 1))
  root:add(rpf.in_type, tvb(8, 1))
  local length_item = root:add(rpf.report_length, tvb(9, 1))
  local md_item = root:add(rpf.md_length, tvb(10, 1))
  root:add(rpf.d, tvb(11, 1))
  root:add(rpf.q, tvb(11, 1))
  root:add(rpf.f, tvb(11, 1))
  root:add(rpf.i, tvb(11, 1))
  local version = math.floor(tvb(0, 1):uint() / 16)
  if version ~= 2 then
    return telemetry_malformed(report_malformed, root, pinfo, len, string.format(
        "version %d, not 2", version))
  end
  if math.floor(tvb(8, 1):uint() / 16) ~= 1 then
    return telemetry_malformed(report_malformed, type_item, pinfo, len, "not an INT report")
  end
  local body = tvb(9, 1):uint() * 4
  if 12 + body > len then
    return telemetry_malformed(report_malformed, length_item, pinfo, len, string.format(
        "report length %d words, the datagram has %d after the first word", body / 4, len - 12))
  end
  root:add(rpf.rep_md_bits, tvb(12, 2))
  root:add(rpf.domain_id, tvb(14, 2))
  root:add(rpf.ds_md_bits, tvb(16, 2))
  root:add(rpf.ds_md_status, tvb(18, 2))
  local bits = tvb(12, 2):uint()
  local md_bytes = tvb(10, 1):uint() * 4
  local ours = tvb(14, 2):uint() == INT_DOMAIN and tvb(16, 2):uint() == 0xC000
  local baseline = metadata_words(bits) * 4
  if 8 + md_bytes > body or (ours and md_bytes ~= baseline + 12) then
    return telemetry_malformed(report_malformed, md_item, pinfo, len, string.format(
        "metadata length %d words disagrees with the report's bits", md_bytes / 4))
  end
  local offset = add_metadata(root, tvb, 20, bits, rpf, false)
  local info = string.format("Report from node %d", tvb(4, 4):uint())
  if ours then
    root:add(rpf.source_node, tvb(offset, 4))
    root:add(rpf.path_seq, tvb(offset + 4, 4))
    root:add(rpf.hop_index, tvb(offset + 8, 4))
    info = info .. string.format(": path %d/%d hop %d%s", tvb(offset, 4):uint(),
                                 tvb(offset + 4, 4):uint(), tvb(offset + 8, 4):uint(),
                                 has_bit(tvb(11, 1):uint(), 0x10) and "" or " (end of path)")
  end
  offset = 20 + md_bytes
  if tvb(8, 1):uint() % 16 == 4 and offset < 12 + body then
    -- The reported datagram's headers; the columns stay the report's.
    Dissector.get("ip"):call(tvb(offset, 12 + body - offset):tvb(), pinfo, tree)
  end
  pinfo.cols.protocol = "aggswitch Telemetry Report"
  pinfo.cols.info = info
  return len
end

function report_proto.dissector(tvb, pinfo, tree)
  return dissect_report(tvb, pinfo, tree)
end

-- On other ports: INT-MD with NPT 1, version 2 and aggswitch's domain; a
-- version 2 INT report of aggswitch's domain.
local function int_heuristic(tvb, pinfo, tree)
  if tvb:len() < 16 then return false end
  if tvb(0, 1):uint() ~= 0x14 or math.floor(tvb(4, 1):uint() / 16) ~= 2 or
     tvb(10, 2):uint() ~= INT_DOMAIN then
    return false
  end
  dissect_int(tvb, pinfo, tree)
  return true
end

local function report_heuristic(tvb, pinfo, tree)
  if tvb:len() < 20 then return false end
  if math.floor(tvb(0, 1):uint() / 16) ~= 2 or math.floor(tvb(8, 1):uint() / 16) ~= 1 or
     tvb(14, 2):uint() ~= INT_DOMAIN then
    return false
  end
  dissect_report(tvb, pinfo, tree)
  return true
end

DissectorTable.get("udp.port"):add(INT_PORT, int_proto)
DissectorTable.get("udp.port"):add(REPORT_PORT, report_proto)
int_proto:register_heuristic("udp", int_heuristic)
report_proto:register_heuristic("udp", report_heuristic)
