#include "memory/room_search.hpp"

#include <algorithm>
#include <limits>

namespace isohost::memory {

namespace {

// Prices closer than a microsecond are the same price: sums of the same terms in another
// order must not decide a plan.
constexpr double kSameSeconds = 1e-6;

// A way that takes nothing in always fits, even when host RAM is already short.
bool ram_takes(const RamLedger& ram, Bytes ram_in) {
  return ram_in == 0 || ram.room_for(ram_in) == RamRoom::enough;
}

double seconds_per_byte(const RoomOption& option) {
  if (option.gives == 0) return std::numeric_limits<double>::infinity();
  return option.seconds / static_cast<double>(option.gives);
}

// Sets candidate `index`'s pick to `option` (or none), keeping the totals.
void set_pick(RoomChoice& choice, std::span<const RoomCandidate> candidates, std::size_t index,
              std::optional<std::size_t> option) {
  if (const auto old = choice.picked[index]) {
    const RoomOption& was = candidates[index].options[*old];
    choice.gives -= was.gives;
    choice.ram_in -= was.ram_in;
    choice.seconds -= was.seconds;
    --choice.steps;
  }
  choice.picked[index] = option;
  if (option) {
    const RoomOption& now = candidates[index].options[*option];
    choice.gives += now.gives;
    choice.ram_in += now.ram_in;
    choice.seconds += now.seconds;
    ++choice.steps;
  }
}

RoomChoice empty_choice(std::size_t candidates) {
  return {.picked = std::vector<std::optional<std::size_t>>(candidates)};
}

// The totals summed afresh in candidate order, so a choice's price does not carry the
// rounding of the additions and subtractions that led to it.
RoomChoice recounted(const RoomChoice& choice, std::span<const RoomCandidate> candidates) {
  RoomChoice fresh = empty_choice(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c)
    set_pick(fresh, candidates, c, choice.picked[c]);
  fresh.covers = choice.covers;
  return fresh;
}

// Whether covering choice `a` is preferred to `b`: cheaper, then fewer steps, then acting on
// the earlier worker, then the weaker way on it.
bool preferred(const RoomChoice& a, const RoomChoice& b) {
  if (a.seconds < b.seconds - kSameSeconds) return true;
  if (a.seconds > b.seconds + kSameSeconds) return false;
  if (a.steps != b.steps) return a.steps < b.steps;
  for (std::size_t i = 0; i < a.picked.size(); ++i) {
    if (a.picked[i] == b.picked[i]) continue;
    if (!a.picked[i] || !b.picked[i]) return a.picked[i].has_value();
    return *a.picked[i] < *b.picked[i];
  }
  return false;
}

// Depth-first over the candidates: each left alone or given one of its ways. A branch stops
// as soon as it covers (a further step only adds price and steps), and is cut when it cannot
// reach the shortfall, or cannot beat the best found even at the cheapest seconds per byte
// left.
class ExhaustiveSearch {
 public:
  ExhaustiveSearch(std::span<const RoomCandidate> candidates, Bytes short_by, const RamLedger& ram)
      : candidates_(candidates),
        short_by_(short_by),
        ram_(ram),
        current_(empty_choice(candidates.size())),
        best_(empty_choice(candidates.size())) {
    reachable_after_.assign(candidates.size() + 1, 0);
    by_price_after_.resize(candidates.size() + 1);
    for (std::size_t i = candidates.size(); i-- > 0;) {
      reachable_after_[i] = reachable_after_[i + 1] + candidates[i].most_it_gives();
      by_price_after_[i] = by_price_after_[i + 1];
      for (const RoomOption& option : candidates[i].options) by_price_after_[i].push_back(&option);
      std::sort(by_price_after_[i].begin(), by_price_after_[i].end(),
                [](const RoomOption* a, const RoomOption* b) {
                  return seconds_per_byte(*a) < seconds_per_byte(*b);
                });
    }
  }

  RoomChoice run() {
    visit(0);
    return recounted(best_, candidates_);
  }

 private:
  void visit(std::size_t index) {
    if (current_.gives >= short_by_) {
      consider();
      return;
    }
    if (index == candidates_.size() || hopeless(index)) return;
    const std::vector<RoomOption>& options = candidates_[index].options;
    for (std::size_t option = 0; option < options.size(); ++option) {
      if (!ram_takes(ram_, current_.ram_in + options[option].ram_in)) continue;
      set_pick(current_, candidates_, index, option);
      visit(index + 1);
      set_pick(current_, candidates_, index, std::nullopt);
    }
    visit(index + 1);
  }

  void consider() {
    current_.covers = true;
    if (!best_.covers || preferred(current_, best_)) best_ = current_;
    current_.covers = false;
  }

  // The least the missing bytes can cost from candidates `index`.. on, relaxed: any of their
  // ways, several per worker, and fractions of a way, cheapest seconds per byte first.
  double least_for(Bytes missing, std::size_t index) const {
    double least = 0;
    for (const RoomOption* option : by_price_after_[index]) {
      if (missing == 0) break;
      if (option->gives == 0) continue;
      const Bytes part = std::min(missing, option->gives);
      least += static_cast<double>(part) * seconds_per_byte(*option);
      missing -= part;
    }
    return least;
  }

  // Whether no completion of the current choice from `index` on can be chosen.
  bool hopeless(std::size_t index) const {
    const Bytes missing = short_by_ - current_.gives;
    if (reachable_after_[index] < missing) return true;
    if (!best_.covers) return false;
    const double least = current_.seconds + least_for(missing, index);
    if (least > best_.seconds + kSameSeconds) return true;
    // At least one more step is needed: at the best's price it would be one step too many.
    return least >= best_.seconds - kSameSeconds && current_.steps + 1 > best_.steps;
  }

  std::span<const RoomCandidate> candidates_;
  Bytes short_by_;
  const RamLedger& ram_;
  std::vector<Bytes> reachable_after_;  // [i]: the most candidates i.. can give together
  // [i]: the ways of candidates i.., the least seconds per byte first.
  std::vector<std::vector<const RoomOption*>> by_price_after_;
  RoomChoice current_;
  RoomChoice best_;
};

// Setting one candidate's way, priced by what it adds: seconds per byte of the shortfall it
// covers (bytes beyond the shortfall buy nothing).
struct Move {
  std::size_t candidate = 0;
  std::size_t option = 0;
  double seconds_per_useful_byte = 0;
};

// The move with the least added seconds per useful byte that host RAM allows; the earlier
// candidate, then the weaker way, on ties. A move may replace a weaker way on its worker.
std::optional<Move> cheapest_move(const RoomChoice& choice,
                                  std::span<const RoomCandidate> candidates, Bytes short_by,
                                  const RamLedger& ram) {
  const Bytes missing = short_by - choice.gives;
  std::optional<Move> best;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    const auto current = choice.picked[c];
    const RoomOption* was = current ? &candidates[c].options[*current] : nullptr;
    for (std::size_t o = 0; o < candidates[c].options.size(); ++o) {
      const RoomOption& option = candidates[c].options[o];
      const Bytes was_gives = was ? was->gives : 0;
      if (option.gives <= was_gives) continue;
      if (!ram_takes(ram, choice.ram_in - (was ? was->ram_in : 0) + option.ram_in)) continue;
      const Bytes useful = std::min(option.gives - was_gives, missing);
      const double added = option.seconds - (was ? was->seconds : 0);
      const Move move{c, o, added / static_cast<double>(useful)};
      if (!best || move.seconds_per_useful_byte < best->seconds_per_useful_byte) best = move;
    }
  }
  return best;
}

// Takes the cheapest move while short. Every worker's strongest way (its reap) takes no host
// RAM in, so this stops short only when all of them together are.
void take_cheapest_moves(RoomChoice& choice, std::span<const RoomCandidate> candidates,
                         Bytes short_by, const RamLedger& ram) {
  while (choice.gives < short_by) {
    const std::optional<Move> move = cheapest_move(choice, candidates, short_by, ram);
    if (!move) return;
    set_pick(choice, candidates, move->candidate, move->option);
  }
}

// Drops the dearest picks the others make unneeded (the later worker first on ties).
void drop_unneeded(RoomChoice& choice, std::span<const RoomCandidate> candidates, Bytes short_by) {
  std::vector<std::size_t> picked;
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (choice.picked[c]) picked.push_back(c);
  }
  const auto option_of = [&](std::size_t c) -> const RoomOption& {
    return candidates[c].options[*choice.picked[c]];
  };
  std::sort(picked.begin(), picked.end(), [&](std::size_t a, std::size_t b) {
    if (option_of(a).seconds != option_of(b).seconds) {
      return option_of(a).seconds > option_of(b).seconds;
    }
    return a > b;
  });
  for (const std::size_t c : picked) {
    if (choice.gives - option_of(c).gives >= short_by) {
      set_pick(choice, candidates, c, std::nullopt);
    }
  }
}

}  // namespace

Bytes RoomCandidate::most_it_gives() const noexcept {
  Bytes most = 0;
  for (const RoomOption& option : options) most = std::max(most, option.gives);
  return most;
}

RoomChoice exhaustive_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                             const RamLedger& ram) {
  return ExhaustiveSearch(candidates, short_by, ram).run();
}

RoomChoice greedy_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                         const RamLedger& ram) {
  RoomChoice choice = empty_choice(candidates.size());
  take_cheapest_moves(choice, candidates, short_by, ram);
  if (choice.gives < short_by) return choice;
  drop_unneeded(choice, candidates, short_by);
  choice.covers = true;
  return recounted(choice, candidates);
}

RoomChoice cheapest_choice(std::span<const RoomCandidate> candidates, Bytes short_by,
                           const RamLedger& ram) {
  if (candidates.size() <= kExhaustiveCandidates) {
    return exhaustive_choice(candidates, short_by, ram);
  }
  return greedy_choice(candidates, short_by, ram);
}

}  // namespace isohost::memory
