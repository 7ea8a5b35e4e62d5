// AdmissionPlan::explain(): the plan's arithmetic in words, with every figure in MiB, so a
// log line or a refusal can be checked by hand.

#include <string>

#include "memory/admission.hpp"

namespace isohost::memory {

namespace {

std::string quoted(std::string_view name) { return "'" + std::string(name) + "'"; }

std::string quoted_list(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) {
    if (!text.empty()) text += ", ";
    text += quoted(name);
  }
  return text;
}

// "need 4096 MiB on GPU 0: free 1200 MiB - reserve 512 MiB - pending 0 MiB = 688 MiB grantable"
std::string grantable_arithmetic(const AdmissionPlan& plan) {
  std::string text = "need " + mib_text(plan.request.bytes) + " on GPU " +
                     std::to_string(plan.request.device) + ": free " + mib_text(plan.free) +
                     " - reserve " + mib_text(plan.reserve) + " - pending " +
                     mib_text(plan.pending) + " = " + mib_text(plan.grantable) + " grantable";
  if (plan.foreign > 0) {
    text += " (processes isohost does not manage hold " + mib_text(plan.foreign) +
            ", never counted as free)";
  }
  return text;
}

// "fixed 612 MiB + held 900 MiB + cache 100 MiB", leaving out parts the step does not give.
std::string step_parts(const AdmissionStep& step) {
  std::string text;
  const auto add = [&text](std::string_view label, Bytes bytes) {
    if (!text.empty()) text += " + ";
    text += std::string(label) + " " + mib_text(bytes);
  };
  if (step.kind != StepKind::release) {
    add("fixed", step.fixed);
    add("held", step.held);
  }
  if (step.kind != StepKind::hibernate && (step.cache > 0 || step.kind == StepKind::release)) {
    add("cache", step.cache);
  }
  if (!step.vram_known) text += ", at least: NVML has no figure";
  return text;
}

std::string step_words(const AdmissionStep& step) {
  const std::string_view verb = step.kind == StepKind::release     ? "releasing"
                                : step.kind == StepKind::hibernate ? "hibernating"
                                                                   : "reaping";
  std::string text =
      std::string(verb) + " idle " + quoted(step.worker_id) + " (" + step_parts(step);
  if (step.kind == StepKind::hibernate) text += " into host RAM";
  return text + ")";
}

// "; host RAM takes in 612 MiB: MemAvailable 9000 MiB - 612 MiB = 8388 MiB (floor 1024 MiB)"
std::string hibernation_ram(const AdmissionPlan& plan) {
  const Bytes moved = plan.hibernated_bytes();
  if (moved == 0) return "";
  std::string text = "; host RAM takes in " + mib_text(moved) + ": MemAvailable " +
                     mib_text(plan.ram_available) + " - " + mib_text(moved) + " = " +
                     mib_text(saturating_sub(plan.ram_available, moved)) + " (floor " +
                     mib_text(plan.ram_floor) + ")";
  if (plan.ram_budget > 0) {
    text += ", workers " + mib_text(plan.ram_workers) + " + " + mib_text(moved) + " = " +
            mib_text(plan.ram_workers + moved) + " of budget " + mib_text(plan.ram_budget);
  }
  return text;
}

// Why reaped workers were not hibernated instead. An environment that does not allow
// hibernation is a choice, not news: left out.
std::string skipped_hibernations(const AdmissionPlan& plan) {
  std::string text;
  for (const SkippedHibernation& skipped : plan.not_hibernated) {
    if (skipped.why == HibernationBlock::env_disallows) continue;
    text += text.empty() ? "; reaped, not hibernated: " : ", ";
    text += quoted(skipped.worker_id) + " (" + mib_text(skipped.bytes) + ": " +
            std::string(to_string(skipped.why));
    if (skipped.why == HibernationBlock::below_ram_floor) {
      text += " of " + mib_text(plan.ram_floor) + ", MemAvailable " + mib_text(plan.ram_available);
    } else if (skipped.why == HibernationBlock::over_ram_budget) {
      text += " of " + mib_text(plan.ram_budget) + ", workers hold " + mib_text(plan.ram_workers);
    } else if (skipped.why == HibernationBlock::exceeds_available) {
      text += " " + mib_text(plan.ram_available);
    }
    text += ")";
  }
  return text;
}

std::string unknown_vram(const AdmissionPlan& plan) {
  if (plan.vram_unknown.empty()) return "";
  return "; NVML has no VRAM figure for " + quoted_list(plan.vram_unknown) +
         " (counted at what the allocator reports, or 0)";
}

std::string outcome_words(AdmissionOutcome outcome) {
  switch (outcome) {
    case AdmissionOutcome::grant:
      return "granted";
    case AdmissionOutcome::release_then_grant:
      return "release, then grant";
    case AdmissionOutcome::hibernate_then_grant:
      return "hibernate, then grant";
    case AdmissionOutcome::reap_then_grant:
      return "reap, then grant";
    case AdmissionOutcome::wait:
      return "wait";
    case AdmissionOutcome::refuse:
      return "refused";
  }
  return "unknown";
}

// "releasing idle 'a' (cache 2048 MiB), then reaping idle 'b' (...) gives 688 MiB + 3560 MiB
// = 4248 MiB >= 4096 MiB"
std::string steps_arithmetic(const AdmissionPlan& plan) {
  std::string text = "; short by " + mib_text(plan.short_by()) + ": ";
  Bytes from_steps = 0;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    if (i > 0) text += ", then ";
    text += step_words(plan.steps[i]);
    from_steps += plan.steps[i].gives_back();
  }
  return text + " gives " + mib_text(plan.grantable) + " + " + mib_text(from_steps) + " = " +
         mib_text(plan.expected) + " >= " + mib_text(plan.request.bytes);
}

// Why there is no room now, and whether waiting can help.
std::string not_enough_arithmetic(const AdmissionPlan& plan) {
  std::string text = "; short by " + mib_text(plan.short_by()) + ": reaping every idle worker " +
                     "gives at most " + mib_text(plan.idle_can_give);
  text += plan.busy_workers.empty() ? ", and no worker is busy"
                                    : "; busy workers " + quoted_list(plan.busy_workers) +
                                          " hold " + mib_text(plan.busy_hold);
  const Bytes eventually = plan.grantable + plan.idle_can_give + plan.busy_hold;
  if (eventually < plan.request.bytes) {
    return text + ": " + mib_text(plan.grantable) + " + " + mib_text(plan.idle_can_give) + " + " +
           mib_text(plan.busy_hold) + " = " + mib_text(eventually) + " < " +
           mib_text(plan.request.bytes);
  }
  if (plan.outcome == AdmissionOutcome::wait) {
    return text + ": waiting for them (waited " + seconds_text(plan.waited) + " of " +
           seconds_text(plan.wait_bound) + ")";
  }
  if (plan.wait_bound == Duration::zero())
    return text + ", but waiting is off (admission_wait 0 s)";
  return text + ", but the request waited " + seconds_text(plan.waited) + " of " +
         seconds_text(plan.wait_bound);
}

}  // namespace

std::string AdmissionPlan::explain() const {
  if (!device_found) {
    return "need " + mib_text(request.bytes) + " on GPU " + std::to_string(request.device) +
           ": no such device; refused";
  }
  std::string text = grantable_arithmetic(*this);
  if (!steps.empty()) text += steps_arithmetic(*this) + hibernation_ram(*this);
  if (outcome == AdmissionOutcome::wait || outcome == AdmissionOutcome::refuse) {
    text += not_enough_arithmetic(*this);
  }
  text += skipped_hibernations(*this) + unknown_vram(*this);
  return text + "; " + outcome_words(outcome);
}

}  // namespace isohost::memory
