// Real-time priority for the threads that keep leases: the configuration manager's loop and, on
// every node, the heartbeat and watcher threads. FaRM runs its lease manager at high priority so
// that a busy machine cannot starve it into a false eviction; here the pollers and client threads
// of several nodes share a few cores, and two seconds without the CPU were seen on this 2-core
// machine under load (every member evicted at once).
//
//   RaiseToLeasePriority();                  // at the thread's start
//   { NormalPriority normal; callback(m); }  // work that is not the lease's runs as before
//
// SCHED_RR at the lowest real-time level: above every normal thread, below anything that asked
// for more. These threads block between short steps (poll, condition waits), so they take the
// CPU only briefly; the kernel's real-time throttling bounds them anyway. Without the privilege
// (root or CAP_SYS_NICE, or RLIMIT_RTPRIO >= 1) the thread stays at normal priority and the first
// refusal is logged once per process (a longer lease then covers a loaded machine).
#ifndef FARM_PLATFORM_PRIORITY_H_
#define FARM_PLATFORM_PRIORITY_H_

namespace farm {

// Makes the calling thread SCHED_RR at priority 1; false (and the thread unchanged) if refused.
bool RaiseToLeasePriority();

// Whether lease threads run at real-time priority in this process (false until one succeeded).
bool LeasePriorityRaised();

// While alive, the calling thread runs at the normal policy it had before RaiseToLeasePriority
// (SCHED_OTHER, nice 0 kept); restores the real-time policy when destroyed if it had it.
class NormalPriority {
 public:
  NormalPriority();
  ~NormalPriority();
  NormalPriority(const NormalPriority&) = delete;
  NormalPriority& operator=(const NormalPriority&) = delete;

 private:
  bool restore_ = false;
};

}  // namespace farm

#endif  // FARM_PLATFORM_PRIORITY_H_
