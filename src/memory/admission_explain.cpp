// AdmissionPlan::explain(): the plan's arithmetic in words, with every figure in MiB and every
// price in seconds at its rate, so a log line or a refusal can be checked by hand.

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

// "fixed 612 MiB + held 900 MiB + cache 100 MiB", leaving out parts the step does not give;
// a sleep says which part moves and which is dropped.
std::string step_parts(const AdmissionStep& step) {
  std::string text;
  const auto add = [&text](std::string_view label, Bytes bytes) {
    if (!text.empty()) text += " + ";
    text += std::string(label) + " " + mib_text(bytes);
  };
  if (step.kind == StepKind::hibernate || step.kind == StepKind::reap) add("fixed", step.fixed);
  if (step.kind != StepKind::release) add("held", step.held);
  if (step.kind == StepKind::sleep) {
    text += " into host RAM";
    if (step.cache > 0) text += ", cache " + mib_text(step.cache) + " dropped";
  } else if (step.cache > 0 || step.kind == StepKind::release) {
    add("cache", step.cache);
  }
  if (step.kind == StepKind::hibernate) text += " into host RAM";
  if (!step.vram_known) text += ", at least: NVML has no figure";
  return text;
}

std::string_view verb_of(StepKind kind) {
  switch (kind) {
    case StepKind::release:
      return "releasing";
    case StepKind::sleep:
      return "sleeping";
    case StepKind::hibernate:
      return "hibernating";
    case StepKind::reap:
      return "reaping";
  }
  return "?";
}

// "0.50 s sleep out (10240 MiB at 0.05 s/GiB)", "5.00 s start (none measured)"; a credit's
// sign is written by the caller.
std::string term_text(const CostTerm& term) {
  std::string text = price_text(term.seconds < 0 ? -term.seconds : term.seconds) + " " +
                     std::string(to_string(term.source));
  if (term.per_gib()) {
    text += " (" + mib_text(term.bytes) + " at " + rate_text(term.seconds_per_gib) + ")";
  }
  return text;
}

// "0 s", one term, or "a + b - c = sum".
std::string terms_text(const std::vector<CostTerm>& terms, double sum) {
  if (terms.empty()) return price_text(0);
  std::string text;
  for (const CostTerm& term : terms) {
    if (!text.empty()) text += term.seconds < 0 ? " - " : " + ";
    text += term_text(term);
  }
  if (terms.size() > 1) text += " = " + price_text(sum);
  return text;
}

// " [now 0.50 s sleep out (...); to undo 0.50 s sleep in (...)]"
std::string cost_words(const AdmissionStep& step) {
  return " [now " + terms_text(step.cost.now, step.seconds_now) + "; to undo " +
         terms_text(step.cost.undo, step.seconds_to_undo) + "]";
}

std::string step_words(const AdmissionStep& step) {
  return std::string(verb_of(step.kind)) + " " + std::string(to_string(step.state)) + " " +
         quoted(step.worker_id) + " (" + step_parts(step) + ")" + cost_words(step);
}

// "; host RAM takes in 612 MiB: MemAvailable 9000 MiB - 612 MiB = 8388 MiB (floor 1024 MiB)"
std::string host_ram_arithmetic(const AdmissionPlan& plan) {
  const Bytes moved = plan.ram_taken_in();
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

// " of 1024 MiB, MemAvailable 3000 MiB": the RAM figure a block was checked against.
std::string block_figures(const AdmissionPlan& plan, HibernationBlock why) {
  switch (why) {
    case HibernationBlock::below_ram_floor:
      return " of " + mib_text(plan.ram_floor) + ", MemAvailable " + mib_text(plan.ram_available);
    case HibernationBlock::over_ram_budget:
      return " of " + mib_text(plan.ram_budget) + ", workers hold " + mib_text(plan.ram_workers);
    case HibernationBlock::exceeds_available:
      return " " + mib_text(plan.ram_available);
    default:
      return "";
  }
}

// Why reaped workers were not hibernated (or slept) instead. An environment that does not
// allow hibernation is a choice, not news: left out.
std::string skipped_steps(const AdmissionPlan& plan, StepKind passed_over) {
  const std::string_view heading =
      passed_over == StepKind::sleep ? "; reaped, not slept: " : "; reaped, not hibernated: ";
  std::string text;
  for (const SkippedHibernation& skipped : plan.not_hibernated) {
    if (skipped.passed_over != passed_over || skipped.why == HibernationBlock::env_disallows) {
      continue;
    }
    text += text.empty() ? heading : ", ";
    text += quoted(skipped.worker_id) + " (" + mib_text(skipped.bytes) + ": " +
            std::string(to_string(skipped.why)) + block_figures(plan, skipped.why) + ")";
  }
  return text;
}

// "; costs 0.37 s now + 0.21 s to undo = 0.58 s, the least of the ways open to 2 idle workers
// (every combination weighed)"
std::string total_price(const AdmissionPlan& plan) {
  const double now = plan.seconds_now();
  const double undo = plan.seconds_to_undo();
  const std::string workers =
      std::to_string(plan.candidates) + " idle worker" + (plan.candidates == 1 ? "" : "s");
  return "; costs " + price_text(now) + " now + " + price_text(undo) +
         " to undo = " + price_text(now + undo) +
         (plan.searched_every_combination
              ? ", the least of the ways open to " + workers + " (every combination weighed)"
              : ", chosen greedily by seconds per byte among " + workers);
}

// "; not chosen: reaping 'a' would give 2660 MiB for 5.00 s start (none measured)"
std::string alternatives_words(const AdmissionPlan& plan) {
  std::string text;
  for (const AdmissionStep& step : plan.alternatives) {
    text += text.empty() ? "; not chosen: " : ", ";
    std::vector<CostTerm> terms = step.cost.now;
    terms.insert(terms.end(), step.cost.undo.begin(), step.cost.undo.end());
    text += std::string(verb_of(step.kind)) + " " + quoted(step.worker_id) + " would give " +
            mib_text(step.gives_back()) + " for " + terms_text(terms, step.seconds());
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
    case AdmissionOutcome::sleep_then_grant:
      return "sleep, then grant";
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

// "releasing idle 'a' (cache 2048 MiB) [...], then reaping idle 'b' (...) [...] gives 688 MiB +
// 3560 MiB = 4248 MiB >= 4096 MiB"
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
  // "Give back": a kept environment's worker is never reaped, so its most is less than a reap.
  std::string text = "; short by " + mib_text(plan.short_by()) +
                     ": the idle workers can give back at most " + mib_text(plan.idle_can_give);
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
  if (!steps.empty()) {
    text += steps_arithmetic(*this) + host_ram_arithmetic(*this) + total_price(*this) +
            alternatives_words(*this);
  }
  if (outcome == AdmissionOutcome::wait || outcome == AdmissionOutcome::refuse) {
    text += not_enough_arithmetic(*this);
  }
  text += skipped_steps(*this, StepKind::hibernate) + skipped_steps(*this, StepKind::sleep) +
          unknown_vram(*this);
  return text + "; " + outcome_words(outcome);
}

}  // namespace isohost::memory
