"""The paper's figures from the tidy tables of `repro collect` (schema.py), one module per family:
`training` (reward, held-out accuracy and reward-entropy curves), `eval_curve` (Ave@k of every evaluated
checkpoint against step), `step_time`, `sampling`, `passk` and `signal_loss`, on the helpers of `common`
(and `records` for the eval-record figures). Each figure function returns `(figure, missing)` and writes
nothing; `repro.report.style.save` writes PNG + PDF.
`repro.report.plots` re-exports every figure and constant under its old names.

Every function draws whatever subset of the grid exists and lists what it could not draw in `missing`
(one human-readable line each: an absent backbone, a method with no runs, a metric a run did not log),
so a half-finished grid still gives figures and the CLI can say what they lack.

Conventions shared by all figures:
- one panel per backbone (catalog order, then unknown backbones alphabetically);
- one line per method x prompt set, seeds averaged step by step; the legend shows the method key, with
  the prompt set appended only when a panel holds more than one (the paper's hard-vs-standard figure);
  the training curves (reward, held-out accuracy, reward-entropy) draw the mean over seeds with a band
  spanning the least to the greatest seed, each seed smoothed first (`seed_bands`), and say so;
- the training reward is by default the mean over prompts of each prompt's first draw
  (sampler/first_draw_reward_mean), sized before any reward is seen, so it estimates the policy's pass rate
  the same way for every method; the mean over every drawn response (sampler/pool_reward_mean, "pool")
  weights the prompts Seq keeps sampling (the hard ones), and the update batch's reward
  (critic/rewards/mean, "selected") is, for Seq and DAPO, the selected batch's and flatters them; both are
  drawn only when asked for, and labelled as such;
- a method has the same colour in every figure (style.METHOD_COLORS); prompt sets differ by line style;
- accuracies (pass@k, group shares) are drawn in percent, beside the paper's percentages;
- "expected" grids default to the paper's: for each backbone of the catalog its `paper_methods`.

The package imports none of its modules here, so importing one family loads only what that family needs.
"""
