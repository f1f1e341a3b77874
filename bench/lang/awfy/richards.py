"""richards.py — Are We Fast Yet's Richards for CPython (the same program as
richards.nbl / richards.lua; README.md: the harness).  Each task's behaviour
is a closure over the scheduler, as in the suite's version; trivial getters
and setters are plain fields (the suite's Python guideline)."""
import sys

import awfy

NO_TASK = None
NO_WORK = None

IDLER = 0
WORKER = 1
HANDLER_A = 2
HANDLER_B = 3
DEVICE_A = 4
DEVICE_B = 5

NUM_TYPES = 6

DEVICE_PACKET_KIND = 0
WORK_PACKET_KIND = 1

DATA_SIZE = 4

TRACING = False


def append(packet, queue_head):
    """The queue that starts at queue_head with packet added at its end."""
    packet.link = NO_WORK
    if NO_WORK is queue_head:
        return packet
    mouse = queue_head
    link = mouse.link
    while NO_WORK is not link:
        mouse = link
        link = mouse.link
    mouse.link = packet
    return queue_head


class DeviceTaskDataRecord:
    def __init__(self):
        self.pending = NO_WORK


class HandlerTaskDataRecord:
    def __init__(self):
        self.work_in = NO_WORK
        self.device_in = NO_WORK

    def device_in_add(self, packet):
        self.device_in = append(packet, self.device_in)

    def work_in_add(self, packet):
        self.work_in = append(packet, self.work_in)


class IdleTaskDataRecord:
    def __init__(self):
        self.control = 1
        self.count = 10000


class WorkerTaskDataRecord:
    def __init__(self):
        self.destination = HANDLER_A
        self.count = 0


class Packet:
    def __init__(self, link, identity, kind):
        self.link = link
        self.kind = kind
        self.identity = identity
        self.datum = 0
        self.data = [0] * DATA_SIZE


class TaskState:
    def __init__(self):
        self.packet_pending = False
        self.task_waiting = False
        self.task_holding = False

    def set_packet_pending(self):
        self.packet_pending = True
        self.task_waiting = False
        self.task_holding = False
        return self

    def set_running(self):
        self.packet_pending = False
        self.task_waiting = False
        self.task_holding = False
        return self

    def set_waiting(self):
        self.packet_pending = False
        self.task_holding = False
        self.task_waiting = True
        return self

    def set_waiting_with_packet(self):
        self.task_holding = False
        self.task_waiting = True
        self.packet_pending = True
        return self

    def is_task_holding_or_waiting(self):
        return self.task_holding or (not self.packet_pending and self.task_waiting)

    def is_waiting_with_packet(self):
        return self.packet_pending and self.task_waiting and not self.task_holding


class TaskControlBlock(TaskState):
    def __init__(self, link, identity, priority, initial_work_queue, initial_state, private_data, fn):
        super().__init__()
        self.link = link
        self.identity = identity
        self.priority = priority
        self.input = initial_work_queue
        self.handle = private_data
        self.packet_pending = initial_state.packet_pending
        self.task_waiting = initial_state.task_waiting
        self.task_holding = initial_state.task_holding
        self.fn = fn

    def add_input_and_check_priority(self, packet, old_task):
        if NO_WORK is self.input:
            self.input = packet
            self.packet_pending = True
            if self.priority > old_task.priority:
                return self
        else:
            self.input = append(packet, self.input)
        return old_task

    def run_task(self):
        if self.is_waiting_with_packet():
            message = self.input
            self.input = message.link
            if NO_WORK is self.input:
                self.set_running()
            else:
                self.set_packet_pending()
        else:
            message = NO_WORK
        return self.fn(message, self.handle)


class Scheduler:
    def __init__(self):
        self.layout = 0
        self.task_list = NO_TASK
        self.current_task = NO_TASK
        self.current_task_identity = 0
        self.task_table = [NO_TASK] * NUM_TYPES
        self.queue_count = 0
        self.hold_count = 0

    def create_device(self, identity, priority, work, state):
        def fn(packet, data_record):
            if NO_WORK is packet:
                packet = data_record.pending
                if NO_WORK is packet:
                    return self.wait()
                data_record.pending = NO_WORK
                return self.queue_packet(packet)
            data_record.pending = packet
            if TRACING:
                self.trace(packet.datum)
            return self.hold_self()

        self.create_task(identity, priority, work, state, DeviceTaskDataRecord(), fn)

    def create_handler(self, identity, priority, work, state):
        def fn(packet, data_record):
            if NO_WORK is not packet:
                if WORK_PACKET_KIND == packet.kind:
                    data_record.work_in_add(packet)
                else:
                    data_record.device_in_add(packet)
            work_packet = data_record.work_in
            if NO_WORK is work_packet:
                return self.wait()
            count = work_packet.datum
            if count >= DATA_SIZE:
                data_record.work_in = work_packet.link
                return self.queue_packet(work_packet)
            device_packet = data_record.device_in
            if NO_WORK is device_packet:
                return self.wait()
            data_record.device_in = device_packet.link
            device_packet.datum = work_packet.data[count]
            work_packet.datum = count + 1
            return self.queue_packet(device_packet)

        self.create_task(identity, priority, work, state, HandlerTaskDataRecord(), fn)

    def create_idler(self, identity, priority, work, state):
        def fn(_packet, data_record):
            data_record.count -= 1
            if 0 == data_record.count:
                return self.hold_self()
            if 0 == data_record.control & 1:
                data_record.control //= 2
                return self.release(DEVICE_A)
            data_record.control = (data_record.control // 2) ^ 53256
            return self.release(DEVICE_B)

        self.create_task(identity, priority, work, state, IdleTaskDataRecord(), fn)

    def create_packet(self, link, identity, kind):
        return Packet(link, identity, kind)

    def create_task(self, identity, priority, work, state, data, fn):
        t = TaskControlBlock(self.task_list, identity, priority, work, state, data, fn)
        self.task_list = t
        self.task_table[identity] = t

    def create_worker(self, identity, priority, work, state):
        def fn(packet, data_record):
            if NO_WORK is packet:
                return self.wait()
            data_record.destination = HANDLER_B if HANDLER_A == data_record.destination else HANDLER_A
            packet.identity = data_record.destination
            packet.datum = 0
            for i in range(DATA_SIZE):
                data_record.count += 1
                if data_record.count > 26:
                    data_record.count = 1
                packet.data[i] = 65 + data_record.count - 1
            return self.queue_packet(packet)

        self.create_task(identity, priority, work, state, WorkerTaskDataRecord(), fn)

    def start(self):
        self.create_idler(IDLER, 0, NO_WORK, TaskState().set_running())
        wkq = self.create_packet(NO_WORK, WORKER, WORK_PACKET_KIND)
        wkq = self.create_packet(wkq, WORKER, WORK_PACKET_KIND)

        self.create_worker(WORKER, 1000, wkq, TaskState().set_waiting_with_packet())
        wkq = self.create_packet(NO_WORK, DEVICE_A, DEVICE_PACKET_KIND)
        wkq = self.create_packet(wkq, DEVICE_A, DEVICE_PACKET_KIND)
        wkq = self.create_packet(wkq, DEVICE_A, DEVICE_PACKET_KIND)

        self.create_handler(HANDLER_A, 2000, wkq, TaskState().set_waiting_with_packet())
        wkq = self.create_packet(NO_WORK, DEVICE_B, DEVICE_PACKET_KIND)
        wkq = self.create_packet(wkq, DEVICE_B, DEVICE_PACKET_KIND)
        wkq = self.create_packet(wkq, DEVICE_B, DEVICE_PACKET_KIND)

        self.create_handler(HANDLER_B, 3000, wkq, TaskState().set_waiting_with_packet())
        self.create_device(DEVICE_A, 4000, NO_WORK, TaskState().set_waiting())
        self.create_device(DEVICE_B, 5000, NO_WORK, TaskState().set_waiting())

        self.schedule()

        return self.queue_count == 23246 and self.hold_count == 9297

    def find_task(self, identity):
        t = self.task_table[identity]
        if NO_TASK is t:
            raise RuntimeError("find_task failed")
        return t

    def hold_self(self):
        self.hold_count += 1
        current_task = self.current_task
        current_task.task_holding = True
        return current_task.link

    def queue_packet(self, packet):
        t = self.find_task(packet.identity)
        if NO_TASK is t:
            return NO_TASK
        self.queue_count += 1
        packet.link = NO_WORK
        packet.identity = self.current_task_identity
        return t.add_input_and_check_priority(packet, self.current_task)

    def release(self, identity):
        t = self.find_task(identity)
        if NO_TASK is t:
            return NO_TASK
        t.task_holding = False
        if t.priority > self.current_task.priority:
            return t
        return self.current_task

    def trace(self, ident):
        self.layout -= 1
        if 0 >= self.layout:
            print()
            self.layout = 50
        print(ident, end="")

    def wait(self):
        current_task = self.current_task
        current_task.task_waiting = True
        return current_task

    def schedule(self):
        self.current_task = self.task_list
        while NO_TASK is not self.current_task:
            if self.current_task.is_task_holding_or_waiting():
                self.current_task = self.current_task.link
            else:
                self.current_task_identity = self.current_task.identity
                if TRACING:
                    self.trace(self.current_task_identity)
                self.current_task = self.current_task.run_task()


class Richards:
    name = "Richards"

    def benchmark(self):
        # The suite's benchmark() returns start()'s verdict; the scheduler
        # comes with it so that the checksum can show the counts.
        s = Scheduler()
        return s.start(), s

    def verify_result(self, result):
        return result[0]

    def checksum(self, result):
        return f"{result[1].queue_count}/{result[1].hold_count}"


if __name__ == "__main__":
    awfy.run(Richards(), sys.argv)
