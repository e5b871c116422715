#include "partition/Plan.h"

#include <fstream>
#include <sstream>

#include "core/Choice.h"
#include "core/Error.h"
#include "core/Files.h"
#include "sluice_plan.pb.h"

namespace sluice::partition {
namespace {

constexpr const char* kFormat = "sluice-plan-2";

Action parseAction(const std::string& s, const std::string& origin) {
  if (s == "swap") return Action::Swap;
  if (s == "recompute") return Action::Recompute;
  throw PlanError("plan " + origin + ": unknown action '" + s + "'");
}

// One stage's fields (checked by the caller).
PlanStage stageFromProto(const proto::PlanStage& q) {
  PlanStage s;
  s.index = q.index();
  s.firstNode = q.first_node();
  s.endNode = q.end_node();
  s.boundaryInputs.assign(q.boundary_inputs().begin(), q.boundary_inputs().end());
  s.params.assign(q.params().begin(), q.params().end());
  s.paramBytes = q.param_bytes();
  s.inFlight = q.in_flight();
  s.forward = q.forward_s();
  s.backward = q.backward_s();
  s.comm = q.comm_s();
  s.swap = q.swap_s();
  s.recompute = q.recompute_s();
  s.loss = q.loss_s();
  s.time = q.time_s();
  s.savedBytes = q.saved_bytes();
  s.keptBytes = q.kept_bytes();
  s.swappedBytes = q.swapped_bytes();
  s.recomputedBytes = q.recomputed_bytes();
  s.staticBytes = q.static_bytes();
  s.peakBytes = q.peak_bytes();
  s.boundaryBytes = q.boundary_bytes();
  s.heldBytes = q.held_bytes();
  s.transientBytes = q.transient_bytes();
  s.windowBytes = q.window_bytes();
  s.swapIO = q.swap_io_s();
  s.scheduleForward = q.schedule_forward_s();
  s.scheduleBackwardInput = q.schedule_backward_input_s();
  s.scheduleBackwardWeight = q.schedule_backward_weight_s();
  s.refill = q.refill_s();
  s.refillShare = q.refill_share();
  s.rankPeakBytes = q.rank_peak_bytes();
  return s;
}

// One stage's fields, as stageFromProto reads them back.
void stageToProto(const PlanStage& s, proto::PlanStage* q) {
  q->set_index(s.index);
  q->set_first_node(s.firstNode);
  q->set_end_node(s.endNode);
  for (auto& b : s.boundaryInputs) q->add_boundary_inputs(b);
  for (auto& b : s.params) q->add_params(b);
  q->set_param_bytes(s.paramBytes);
  q->set_in_flight(s.inFlight);
  q->set_forward_s(s.forward);
  q->set_backward_s(s.backward);
  q->set_comm_s(s.comm);
  q->set_swap_s(s.swap);
  q->set_recompute_s(s.recompute);
  q->set_loss_s(s.loss);
  q->set_time_s(s.time);
  q->set_saved_bytes(s.savedBytes);
  q->set_kept_bytes(s.keptBytes);
  q->set_swapped_bytes(s.swappedBytes);
  q->set_recomputed_bytes(s.recomputedBytes);
  q->set_static_bytes(s.staticBytes);
  q->set_peak_bytes(s.peakBytes);
  q->set_boundary_bytes(s.boundaryBytes);
  q->set_held_bytes(s.heldBytes);
  q->set_transient_bytes(s.transientBytes);
  q->set_window_bytes(s.windowBytes);
  q->set_swap_io_s(s.swapIO);
  q->set_schedule_forward_s(s.scheduleForward);
  q->set_schedule_backward_input_s(s.scheduleBackwardInput);
  q->set_schedule_backward_weight_s(s.scheduleBackwardWeight);
  q->set_refill_s(s.refill);
  q->set_refill_share(s.refillShare);
  q->set_rank_peak_bytes(s.rankPeakBytes);
}

// One swap or recompute decision's fields.
void decisionToProto(const TensorDecision& d, proto::TensorDecision* q) {
  q->set_node(d.node);
  q->set_slot(d.slot);
  for (int n : d.segment) q->add_segment(n);
  q->set_stage(d.stage);
  q->set_op(d.op);
  q->set_bytes(d.bytes);
  q->set_action(actionName(d.action));
}

}  // namespace

std::string Plan::toBytes() const {
  proto::Plan p;
  p.set_format(kFormat);
  p.set_graph_hash(graphHash);
  p.set_method(partitionMethodName(method));
  p.set_schedule(schedule->name);
  p.set_microbatches(microBatches);
  p.set_chunks(chunks);
  p.set_micro_batch_size(microBatchSize);
  p.set_data_parallel(dataParallel);
  p.set_budget_bytes(budgetBytes);
  p.set_step_time_s(stepTime);
  p.set_bubble_fraction(bubbleFraction);
  p.set_profile_blas(profileBlas);
  p.set_profile_threads(profileThreads);
  p.set_policy(choiceName(memory::memoryPolicies(), policy));
  p.set_swap_window_bytes(swapWindowBytes);
  p.set_schedule_comm_s(scheduleComm);
  for (int c : opLevelCuts) p.add_op_level_cuts(c);
  p.set_op_level_step_time_s(opLevelStepTime);
  p.set_min_op_level_gain(minOpLevelGain);
  p.set_refill_wait_s(refillWaitSeconds);
  for (auto& s : stages) stageToProto(s, p.add_stages());
  for (auto& d : decisions) decisionToProto(d, p.add_decisions());
  return p.SerializeAsString();
}

void Plan::save(const std::string& path) const { writeFileAtomically(path, toBytes()); }

Plan Plan::fromBytes(const std::string& bytes, const std::string& origin) {
  proto::Plan p;
  SLUICE_CHECK(p.ParseFromString(bytes) && !p.format().empty() && !p.graph_hash().empty() && p.stages_size() > 0,
               PlanError,
               "plan " << origin << " is truncated or not a Sluice plan; make it again with `sluice partition`");
  SLUICE_CHECK(p.format() == kFormat, PlanError,
               "plan " << origin << " was made by an older Sluice (format '" << p.format() << "', this one reads '"
                       << kFormat << "'): make it again with `sluice profile` and `sluice partition`");
  Plan out;
  out.graphHash = p.graph_hash();
  out.schedule = pipeline::findScheduleKind(p.schedule());
  SLUICE_CHECK(out.schedule, PlanError,
               "plan " << origin << " is for schedule '" << p.schedule() << "', which this Sluice does not have ("
                       << joinedWithOr(pipeline::scheduleNames()) << "): make it again with `sluice partition`");
  out.microBatches = p.microbatches();
  out.chunks = std::max(1, p.chunks());
  out.microBatchSize = p.micro_batch_size();
  out.dataParallel = p.data_parallel();
  out.budgetBytes = p.budget_bytes();
  out.stepTime = p.step_time_s();
  out.bubbleFraction = p.bubble_fraction();
  out.profileBlas = p.profile_blas();
  out.profileThreads = p.profile_threads();
  try {  // (a plan made before the policy field existed: plan)
    out.method = parsePlanMethod(p.method());
    out.policy = p.policy().empty() ? memory::MemoryPolicy::Plan
                                     : parseChoice(memory::memoryPolicies(), p.policy(), "memory policy");
  } catch (const ConfigError& e) {
    throw PlanError("plan " + origin + ": " + e.what());
  }
  out.swapWindowBytes = p.swap_window_bytes();
  out.scheduleComm = p.schedule_comm_s();
  out.opLevelCuts.assign(p.op_level_cuts().begin(), p.op_level_cuts().end());
  out.opLevelStepTime = p.op_level_step_time_s();
  out.minOpLevelGain = p.min_op_level_gain();
  out.refillWaitSeconds = p.refill_wait_s();
  int expectFirst = 0;
  for (auto& q : p.stages()) {
    PlanStage s = stageFromProto(q);
    SLUICE_CHECK(s.index == static_cast<int>(out.stages.size()) && s.firstNode == expectFirst && s.endNode > s.firstNode,
                 PlanError, "plan " << origin << " is inconsistent: stage " << s.index << " covers [" << s.firstNode
                                    << ", " << s.endNode << ")");
    expectFirst = s.endNode;
    out.stages.push_back(std::move(s));
  }
  for (auto& q : p.decisions()) {
    TensorDecision d;
    d.node = q.node();
    d.slot = q.slot();
    d.stage = q.stage();
    d.op = q.op();
    d.bytes = q.bytes();
    d.action = parseAction(q.action(), origin);
    d.segment.assign(q.segment().begin(), q.segment().end());
    SLUICE_CHECK(0 <= d.stage && d.stage < static_cast<int>(out.stages.size()), PlanError,
                 "plan " << origin << " is inconsistent: a decision names stage " << d.stage);
    out.decisions.push_back(std::move(d));
  }
  return out;
}

Plan Plan::load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SLUICE_CHECK(f, PlanError, "cannot open plan " << path);
  std::ostringstream os;
  os << f.rdbuf();
  return fromBytes(os.str(), path);
}

void Plan::checkMatches(const OpGraph& graph, int stageCount, const std::string& origin) const {
  SLUICE_CHECK(graphHash == graph.hash(), PlanError,
               "plan " << origin << " was made for another model or batch shape (graph hash " << graphHash
                       << "; this config captures " << graph.hash()
                       << "): make a plan for this config with `sluice profile` and `sluice partition`");
  SLUICE_CHECK(static_cast<int>(stages.size()) == stageCount, PlanError,
               "plan " << origin << " has " << stages.size() << " stages but the config runs " << stageCount
                       << " (pipeline.stages x pipeline.chunks)");
  SLUICE_CHECK(stages.back().endNode == graph.numNodes(), PlanError,
               "plan " << origin << " ends at node " << stages.back().endNode << " but the graph has "
                       << graph.numNodes());
}

}  // namespace sluice::partition
