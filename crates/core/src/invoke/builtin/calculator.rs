//! `calculator`: statistics over `numbers` and an optional comparison of named values.
//!
//! Numbers must be JSON numbers (no strings, no booleans) and every result must be finite.
//! Sums are exact to the last bit (a running error term, then a correctly rounded division),
//! so the mean of `[0.1, 0.2, 0.3]` is `0.2`. Ties in `compare` go to the key that sorts first.

use serde_json::{Map, Value, json};

use crate::invoke::result::{ErrorCode, Output, SkillError};

const OPS: [&str; 5] = ["mean", "median", "min", "max", "sum"];

pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "numbers": {
                "type": "array", "minItems": 1, "items": {"type": "number"},
                "description": "The data; JSON numbers only."
            },
            "ops": {
                "type": "array", "minItems": 1, "items": {"type": "string"},
                "description": "Any of mean, median, min, max, sum."
            },
            "compare": {
                "type": "object", "additionalProperties": {"type": "number"},
                "description": "Named values to compare, at least two, e.g. {\"a\": 10, \"b\": 12}.",
                "default": {}
            }
        },
        "required": ["numbers", "ops"],
        "additionalProperties": false
    })
}

pub fn run(input: &Value) -> Result<Output, SkillError> {
    // The host checked the schema; these hold for any caller all the same.
    let numbers: Option<Vec<f64>> = input["numbers"]
        .as_array()
        .and_then(|a| a.iter().map(Value::as_f64).collect());
    let numbers = match numbers {
        Some(n) if !n.is_empty() => n,
        _ => {
            return Err(SkillError::invalid(
                "numbers",
                "must be a non-empty array of numbers",
            ));
        }
    };
    let mut ops: Vec<&str> = Vec::new();
    for op in input["ops"].as_array().into_iter().flatten() {
        let op = op.as_str().unwrap_or_default();
        if !ops.contains(&op) {
            ops.push(op);
        }
    }
    let invalid: Vec<&str> = ops.iter().copied().filter(|o| !OPS.contains(o)).collect();
    if !invalid.is_empty() {
        return Err(SkillError::new(
            ErrorCode::InvalidArgument,
            format!(
                "ops: unsupported operation(s) {}; supported: {}",
                invalid.join(", "),
                OPS.join(", ")
            ),
        )
        .with_details(json!({"field": "ops", "invalid_ops": invalid, "supported_ops": OPS})));
    }
    let mut results = Map::new();
    for op in ops {
        let value = match op {
            "mean" => mean(&numbers),
            "median" => median(&numbers),
            "min" => numbers.iter().copied().fold(f64::INFINITY, f64::min),
            "max" => numbers.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            _ => sum(&numbers).0,
        };
        results.insert(op.to_owned(), finite(op, value)?);
    }
    let mut data = json!({ "results": results });
    if let Some(compare) = input.get("compare").and_then(Value::as_object) {
        data["comparison"] = comparison(compare)?;
    }
    Ok(data.into())
}

fn finite(what: &str, value: f64) -> Result<Value, SkillError> {
    if !value.is_finite() {
        return Err(SkillError::new(
            ErrorCode::InvalidArgument,
            format!("the result of {what} is not a finite number"),
        )
        .with_details(json!({"field": "numbers", "op": what})));
    }
    Ok(json!(value))
}

/// The sum as an unevaluated pair `hi + lo` with `hi` the correctly rounded sum.
fn sum(numbers: &[f64]) -> (f64, f64) {
    let (mut s, mut c) = (0.0f64, 0.0f64);
    for &x in numbers {
        // Neumaier: the rounding error of each addition goes to `c`.
        let t = s + x;
        c += if s.abs() >= x.abs() {
            (s - t) + x
        } else {
            (x - t) + s
        };
        s = t;
    }
    let hi = s + c;
    (hi, c - (hi - s))
}

fn mean(numbers: &[f64]) -> f64 {
    let (hi, lo) = sum(numbers);
    let n = numbers.len() as f64;
    if !hi.is_finite() {
        // The sum overflows but the mean may not: average the scaled values instead.
        let scaled: Vec<f64> = numbers.iter().map(|x| x / n).collect();
        return sum(&scaled).0;
    }
    let q = hi / n;
    // The remainder of `hi / n`, exact through a fused multiply-add, corrects the quotient.
    let r = (-q).mul_add(n, hi) + lo;
    q + r / n
}

fn median(numbers: &[f64]) -> f64 {
    let mut sorted = numbers.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        let (a, b) = (sorted[mid - 1], sorted[mid]);
        let m = (a + b) / 2.0;
        if m.is_finite() { m } else { a / 2.0 + b / 2.0 }
    }
}

fn comparison(compare: &Map<String, Value>) -> Result<Value, SkillError> {
    let values: Vec<(&String, f64)> = compare
        .iter()
        .filter_map(|(k, v)| Some((k, v.as_f64()?)))
        .collect();
    if values.len() < 2 {
        return Err(SkillError::invalid(
            "compare",
            "needs at least two named numbers",
        ));
    }
    let pick = |better: fn(f64, f64) -> bool| {
        values
            .iter()
            .copied()
            .reduce(|best, x| if better(x.1, best.1) { x } else { best })
            .expect("at least two values")
    };
    let (max_key, max) = pick(|x, best| x > best);
    let (min_key, min) = pick(|x, best| x < best);
    Ok(json!({
        "max": {"key": max_key, "value": max},
        "min": {"key": min_key, "value": min},
        "difference": finite("compare", max - min)?,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calc(input: Value) -> Result<Value, SkillError> {
        run(&input).map(|o| o.data)
    }

    #[test]
    fn seed_sample_and_exact_means() {
        let out =
            calc(json!({"numbers": [10.5, 9.9, 11.2], "ops": ["mean", "median", "min", "max"]}))
                .unwrap();
        let r = &out["results"];
        assert!((r["mean"].as_f64().unwrap() - 10.533333333333333).abs() < 1e-12);
        assert_eq!(r["median"], json!(10.5));
        assert_eq!(r["min"], json!(9.9));
        assert_eq!(r["max"], json!(11.2));
        assert!(out.get("comparison").is_none());
        let out = calc(json!({"numbers": [0.1, 0.2, 0.3], "ops": ["mean", "sum"]})).unwrap();
        assert_eq!(out["results"]["mean"], json!(0.2));
        assert_eq!(out["results"]["sum"], json!(0.6));
        let out = calc(json!({"numbers": [1e16, 1.0, -1e16], "ops": ["sum"]})).unwrap();
        assert_eq!(out["results"]["sum"], json!(1.0));
    }

    #[test]
    fn medians_of_odd_and_even_lengths() {
        let median_of = |n: Value| {
            calc(json!({"numbers": n, "ops": ["median"]})).unwrap()["results"]["median"].clone()
        };
        assert_eq!(median_of(json!([3, 1, 2])), json!(2.0));
        assert_eq!(median_of(json!([4, 1, 3, 2])), json!(2.5));
        assert_eq!(median_of(json!([7])), json!(7.0));
        assert_eq!(median_of(json!([1e308, 1.7e308])), json!(1.35e308));
    }

    #[test]
    fn compare_and_duplicate_ops() {
        let out = calc(
            json!({"numbers": [1], "ops": ["sum", "sum"], "compare": {"a": 10, "b": 12, "c": 12}}),
        )
        .unwrap();
        assert_eq!(out["results"], json!({"sum": 1.0}));
        assert_eq!(
            out["comparison"],
            json!({"max": {"key": "b", "value": 12.0}, "min": {"key": "a", "value": 10.0}, "difference": 2.0})
        );
    }

    #[test]
    fn semantic_errors() {
        let e = calc(json!({"numbers": [1], "ops": ["mean", "mode", "avg"]})).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert_eq!(e.details.unwrap()["invalid_ops"], json!(["mode", "avg"]));
        let e = calc(json!({"numbers": [1e308, 1e308], "ops": ["sum"]})).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        let out = calc(json!({"numbers": [1e308, 1e308], "ops": ["mean"]})).unwrap();
        assert_eq!(out["results"]["mean"], json!(1e308));
        for bad in [
            json!({"numbers": [], "ops": ["median"]}),
            json!({"numbers": ["1", 2], "ops": ["sum"]}),
        ] {
            assert_eq!(calc(bad).unwrap_err().details.unwrap()["field"], "numbers");
        }
        let e = calc(json!({"numbers": [1], "ops": ["sum"], "compare": {"a": 1}})).unwrap_err();
        assert_eq!(e.details.unwrap()["field"], "compare");
        let e =
            calc(json!({"numbers": [1], "ops": ["sum"], "compare": {"a": 1.7e308, "b": -1.7e308}}))
                .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }
}
