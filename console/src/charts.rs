//! Small charts, drawn on the server as inline SVG: no script, no image
//! request. Bars of deliveries per interval, failures over them in red.

use crate::html::Html;

/// One bar: deliveries and failures in an interval.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub struct Bar {
    pub deliveries: i64,
    pub failures: i64,
}

const WIDTH: i64 = 240;
const HEIGHT: i64 = 48;

/// `bars` oldest first, as an SVG of fixed size with a text title (what a
/// screen reader and a tooltip say).
pub fn bars(title: &str, bars: &[Bar]) -> Html {
    let top = bars
        .iter()
        .map(|b| b.deliveries.max(b.failures))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = WIDTH / (bars.len().max(1) as i64);
    let total: i64 = bars.iter().map(|b| b.deliveries).sum();
    let failed: i64 = bars.iter().map(|b| b.failures).sum();
    let mut svg = Html::new();
    svg.raw("<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"")
        .attr("viewBox", format!("0 0 {WIDTH} {HEIGHT}"))
        .attr("width", WIDTH)
        .attr("height", HEIGHT)
        .raw("><title>")
        .text(format!("{title}: {total} deliveries, {failed} failures"))
        .raw("</title>");
    for (n, bar) in bars.iter().enumerate() {
        let x = n as i64 * slot;
        for (value, class) in [(bar.deliveries, "d"), (bar.failures, "f")] {
            if value <= 0 {
                continue;
            }
            // At least a pixel for anything that happened.
            let h = (value * HEIGHT / top).max(1);
            svg.raw("<rect")
                .attr("class", class)
                .attr("x", x)
                .attr("y", HEIGHT - h)
                .attr("width", (slot - 1).max(1))
                .attr("height", h)
                .raw("/>");
        }
    }
    svg.raw("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_to_the_largest_and_show_every_nonzero_value() {
        let svg = bars(
            "stripe <last hour>",
            &[
                Bar {
                    deliveries: 100,
                    failures: 0,
                },
                Bar {
                    deliveries: 1,
                    failures: 1,
                },
                Bar::default(),
            ],
        )
        .into_string();
        assert!(svg.contains("height=\"48\"/>"), "{svg}");
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert!(
            svg.contains("stripe &lt;last hour&gt;: 101 deliveries, 1 failures"),
            "{svg}"
        );
        assert!(!svg.contains("<last"), "{svg}");
    }

    #[test]
    fn no_data_draws_an_empty_chart() {
        let svg = bars("x", &[]).into_string();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(!svg.contains("<rect"));
    }
}
