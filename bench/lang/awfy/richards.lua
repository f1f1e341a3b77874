-- richards.lua — Are We Fast Yet's Richards for Lua 5.4 (the same program as
-- richards.nbl / richards.py; README.md: the harness).  Classes are tables
-- used as metatables; each task's behaviour is a closure over the scheduler,
-- as in the suite's version.  Indices are 1-based (identities 1..6).
local dir = arg[0]:match("^(.*)/") or "."
package.path = dir .. "/?.lua;" .. package.path
local awfy = require("awfy")

local NO_TASK = nil
local NO_WORK = nil

local IDLER = 1
local WORKER = 2
local HANDLER_A = 3
local HANDLER_B = 4
local DEVICE_A = 5
local DEVICE_B = 6

local DEVICE_PACKET_KIND = 0
local WORK_PACKET_KIND = 1

local DATA_SIZE = 4

local TRACING = false

-- The queue that starts at queue_head with packet added at its end.
local function append(packet, queue_head)
  packet.link = NO_WORK
  if NO_WORK == queue_head then
    return packet
  end
  local mouse = queue_head
  local link = mouse.link
  while NO_WORK ~= link do
    mouse = link
    link = mouse.link
  end
  mouse.link = packet
  return queue_head
end

local HandlerTaskDataRecord = {}
HandlerTaskDataRecord.__index = HandlerTaskDataRecord

function HandlerTaskDataRecord.new()
  return setmetatable({work_in = NO_WORK, device_in = NO_WORK}, HandlerTaskDataRecord)
end

function HandlerTaskDataRecord:device_in_add(packet)
  self.device_in = append(packet, self.device_in)
end

function HandlerTaskDataRecord:work_in_add(packet)
  self.work_in = append(packet, self.work_in)
end

local function new_packet(link, identity, kind)
  return {link = link, kind = kind, identity = identity, datum = 1, data = {0, 0, 0, 0}}
end

-- TaskState: the three flags; a TaskControlBlock is one too.
local TaskState = {}
TaskState.__index = TaskState

function TaskState.new()
  return setmetatable({packet_pending = false, task_waiting = false, task_holding = false}, TaskState)
end

function TaskState:set_packet_pending()
  self.packet_pending = true
  self.task_waiting = false
  self.task_holding = false
  return self
end

function TaskState:set_running()
  self.packet_pending = false
  self.task_waiting = false
  self.task_holding = false
  return self
end

function TaskState:set_waiting()
  self.packet_pending = false
  self.task_holding = false
  self.task_waiting = true
  return self
end

function TaskState:set_waiting_with_packet()
  self.task_holding = false
  self.task_waiting = true
  self.packet_pending = true
  return self
end

function TaskState:is_task_holding_or_waiting()
  return self.task_holding or (not self.packet_pending and self.task_waiting)
end

function TaskState:is_waiting_with_packet()
  return self.packet_pending and self.task_waiting and not self.task_holding
end

local TaskControlBlock = setmetatable({}, {__index = TaskState})
TaskControlBlock.__index = TaskControlBlock

function TaskControlBlock.new(link, identity, priority, initial_work_queue, initial_state, private_data, fn)
  return setmetatable({
    link = link,
    identity = identity,
    priority = priority,
    input = initial_work_queue,
    handle = private_data,
    packet_pending = initial_state.packet_pending,
    task_waiting = initial_state.task_waiting,
    task_holding = initial_state.task_holding,
    fn = fn,
  }, TaskControlBlock)
end

function TaskControlBlock:add_input_and_check_priority(packet, old_task)
  if NO_WORK == self.input then
    self.input = packet
    self.packet_pending = true
    if self.priority > old_task.priority then
      return self
    end
  else
    self.input = append(packet, self.input)
  end
  return old_task
end

function TaskControlBlock:run_task()
  local message
  if self:is_waiting_with_packet() then
    message = self.input
    self.input = message.link
    if NO_WORK == self.input then
      self:set_running()
    else
      self:set_packet_pending()
    end
  else
    message = NO_WORK
  end
  return self.fn(message, self.handle)
end

local Scheduler = {}
Scheduler.__index = Scheduler

function Scheduler.new()
  return setmetatable({
    layout = 0,
    task_list = NO_TASK,
    current_task = NO_TASK,
    current_task_identity = 0,
    task_table = {NO_TASK, NO_TASK, NO_TASK, NO_TASK, NO_TASK, NO_TASK},
    queue_count = 0,
    hold_count = 0,
  }, Scheduler)
end

function Scheduler:create_device(identity, priority, work, state)
  self:create_task(identity, priority, work, state, {pending = NO_WORK}, function(packet, data_record)
    if NO_WORK == packet then
      packet = data_record.pending
      if NO_WORK == packet then
        return self:wait()
      end
      data_record.pending = NO_WORK
      return self:queue_packet(packet)
    end
    data_record.pending = packet
    if TRACING then
      self:trace(packet.datum)
    end
    return self:hold_self()
  end)
end

function Scheduler:create_handler(identity, priority, work, state)
  self:create_task(identity, priority, work, state, HandlerTaskDataRecord.new(), function(packet, data_record)
    if NO_WORK ~= packet then
      if WORK_PACKET_KIND == packet.kind then
        data_record:work_in_add(packet)
      else
        data_record:device_in_add(packet)
      end
    end
    local work_packet = data_record.work_in
    if NO_WORK == work_packet then
      return self:wait()
    end
    local count = work_packet.datum
    if count > DATA_SIZE then
      data_record.work_in = work_packet.link
      return self:queue_packet(work_packet)
    end
    local device_packet = data_record.device_in
    if NO_WORK == device_packet then
      return self:wait()
    end
    data_record.device_in = device_packet.link
    device_packet.datum = work_packet.data[count]
    work_packet.datum = count + 1
    return self:queue_packet(device_packet)
  end)
end

function Scheduler:create_idler(identity, priority, work, state)
  self:create_task(identity, priority, work, state, {control = 1, count = 10000}, function(_, data_record)
    data_record.count = data_record.count - 1
    if 0 == data_record.count then
      return self:hold_self()
    end
    if 0 == data_record.control & 1 then
      data_record.control = data_record.control // 2
      return self:release(DEVICE_A)
    end
    data_record.control = (data_record.control // 2) ~ 53256
    return self:release(DEVICE_B)
  end)
end

function Scheduler:create_packet(link, identity, kind)
  return new_packet(link, identity, kind)
end

function Scheduler:create_task(identity, priority, work, state, data, fn)
  local t = TaskControlBlock.new(self.task_list, identity, priority, work, state, data, fn)
  self.task_list = t
  self.task_table[identity] = t
end

function Scheduler:create_worker(identity, priority, work, state)
  self:create_task(identity, priority, work, state, {destination = HANDLER_A, count = 0}, function(packet, data_record)
    if NO_WORK == packet then
      return self:wait()
    end
    data_record.destination = (HANDLER_A == data_record.destination) and HANDLER_B or HANDLER_A
    packet.identity = data_record.destination
    packet.datum = 1
    for i = 1, DATA_SIZE do
      data_record.count = data_record.count + 1
      if data_record.count > 26 then
        data_record.count = 1
      end
      packet.data[i] = 65 + data_record.count - 1
    end
    return self:queue_packet(packet)
  end)
end

function Scheduler:start()
  self:create_idler(IDLER, 0, NO_WORK, TaskState.new():set_running())
  local wkq = self:create_packet(NO_WORK, WORKER, WORK_PACKET_KIND)
  wkq = self:create_packet(wkq, WORKER, WORK_PACKET_KIND)

  self:create_worker(WORKER, 1000, wkq, TaskState.new():set_waiting_with_packet())
  wkq = self:create_packet(NO_WORK, DEVICE_A, DEVICE_PACKET_KIND)
  wkq = self:create_packet(wkq, DEVICE_A, DEVICE_PACKET_KIND)
  wkq = self:create_packet(wkq, DEVICE_A, DEVICE_PACKET_KIND)

  self:create_handler(HANDLER_A, 2000, wkq, TaskState.new():set_waiting_with_packet())
  wkq = self:create_packet(NO_WORK, DEVICE_B, DEVICE_PACKET_KIND)
  wkq = self:create_packet(wkq, DEVICE_B, DEVICE_PACKET_KIND)
  wkq = self:create_packet(wkq, DEVICE_B, DEVICE_PACKET_KIND)

  self:create_handler(HANDLER_B, 3000, wkq, TaskState.new():set_waiting_with_packet())
  self:create_device(DEVICE_A, 4000, NO_WORK, TaskState.new():set_waiting())
  self:create_device(DEVICE_B, 5000, NO_WORK, TaskState.new():set_waiting())

  self:schedule()

  return self.queue_count == 23246 and self.hold_count == 9297
end

function Scheduler:find_task(identity)
  local t = self.task_table[identity]
  if NO_TASK == t then
    error("find_task failed")
  end
  return t
end

function Scheduler:hold_self()
  self.hold_count = self.hold_count + 1
  local current_task = self.current_task
  current_task.task_holding = true
  return current_task.link
end

function Scheduler:queue_packet(packet)
  local t = self:find_task(packet.identity)
  if NO_TASK == t then
    return NO_TASK
  end
  self.queue_count = self.queue_count + 1
  packet.link = NO_WORK
  packet.identity = self.current_task_identity
  return t:add_input_and_check_priority(packet, self.current_task)
end

function Scheduler:release(identity)
  local t = self:find_task(identity)
  if NO_TASK == t then
    return NO_TASK
  end
  t.task_holding = false
  if t.priority > self.current_task.priority then
    return t
  end
  return self.current_task
end

function Scheduler:trace(id)
  self.layout = self.layout - 1
  if 0 >= self.layout then
    io.write("\n")
    self.layout = 50
  end
  io.write(tostring(id))
end

function Scheduler:wait()
  local current_task = self.current_task
  current_task.task_waiting = true
  return current_task
end

function Scheduler:schedule()
  self.current_task = self.task_list
  while NO_TASK ~= self.current_task do
    if self.current_task:is_task_holding_or_waiting() then
      self.current_task = self.current_task.link
    else
      self.current_task_identity = self.current_task.identity
      if TRACING then
        self:trace(self.current_task_identity - 1)
      end
      self.current_task = self.current_task:run_task()
    end
  end
end

local bench = {name = "Richards"}

-- The suite's benchmark() returns start()'s verdict; the scheduler comes with
-- it so that the checksum can show the counts the verdict is about.
function bench:benchmark()
  local s = Scheduler.new()
  return {ok = s:start(), scheduler = s}
end

function bench:verify_result(result)
  return result.ok
end

function bench:checksum(result)
  return result.scheduler.queue_count .. "/" .. result.scheduler.hold_count
end

awfy.run(bench, arg)
