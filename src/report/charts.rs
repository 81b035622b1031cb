//! The report's figures: a score table as horizontal bars, one per cell with a value, its
//! interval drawn as a whisker, drawn by plotters as SVG for the HTML page. Text is written as
//! SVG text for the browser to set, so no font file is needed.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

use super::tables::Table;

#[derive(Debug, thiserror::Error)]
#[error("cannot draw the chart of table {table}: {problem}")]
pub struct ChartError {
    table: String,
    problem: String,
}

/// Colours of the columns (colour-blind safe, Okabe and Ito's order).
const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(120, 120, 120),
];

const WIDTH: u32 = 860;
const BAR_HEIGHT: u32 = 22;
/// Room for the axis, its caption and the margins.
const FRAME_HEIGHT: u32 = 70;
/// Pixels: plotters' default label sizes are relative to the chart's height, which would make
/// a two-bar chart's text unreadably small.
const FONT_SIZE: u32 = 13;
/// Pixels per character of a bar's label, at [`FONT_SIZE`].
const LABEL_CHAR_WIDTH: u32 = 7;

/// A cell with a value, as drawn.
struct Bar {
    label: String,
    column: usize,
    value: f64,
    interval: Option<(f64, f64)>,
}

/// The axis a table's numbers need: 0-100 for scores; otherwise the values' and intervals'
/// span with zero in it (differences are drawn from zero either way).
fn axis_span(table: &Table, bars: &[Bar]) -> (f64, f64) {
    if table.measure == super::tables::SCORE_MEASURE {
        return (0.0, 100.0);
    }
    let ends = bars
        .iter()
        .flat_map(|bar| {
            [
                Some(bar.value),
                bar.interval.map(|i| i.0),
                bar.interval.map(|i| i.1),
            ]
        })
        .flatten();
    let (low, high) = ends.fold((0.0_f64, 0.0_f64), |(low, high), v| {
        (low.min(v), high.max(v))
    });
    let pad = ((high - low) * 0.05).max(1.0);
    (if low < 0.0 { low - pad } else { 0.0 }, high + pad)
}

/// The chart of `table` as an SVG document, or `None` when no cell has a value.
pub fn score_chart(table: &Table) -> Result<Option<String>, ChartError> {
    let bars: Vec<Bar> = table
        .rows
        .iter()
        .flat_map(|row| {
            row.cells
                .iter()
                .enumerate()
                .filter_map(move |(column, cell)| {
                    Some(Bar {
                        label: format!("{} · {}", row.label.join(" "), table.columns[column]),
                        column,
                        value: cell.value?,
                        interval: cell.interval.map(|i| (i.low, i.high)),
                    })
                })
        })
        .collect();
    if bars.is_empty() {
        return Ok(None);
    }
    let failed = |problem: String| ChartError {
        table: table.id.clone(),
        problem,
    };
    let (low, high) = axis_span(table, &bars);
    let longest_label = bars.iter().map(|b| b.label.chars().count()).max();
    let label_width = (longest_label.unwrap_or(0) as u32 * LABEL_CHAR_WIDTH + 16).min(WIDTH / 2);
    let height = FRAME_HEIGHT + BAR_HEIGHT * bars.len() as u32;
    let count = bars.len();
    // Segment 0 is at the bottom: the first bar goes in the top segment.
    let segment = |index: usize| count - 1 - index;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| failed(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .margin_right(30)
            .x_label_area_size(40)
            .y_label_area_size(label_width)
            .build_cartesian_2d(low..high, (0..count).into_segmented())
            .map_err(|e| failed(e.to_string()))?;
        let label_of = |value: &SegmentValue<usize>| match value {
            SegmentValue::CenterOf(position) if *position < count => {
                bars[count - 1 - position].label.clone()
            }
            _ => String::new(),
        };
        chart
            .configure_mesh()
            .disable_y_mesh()
            .x_max_light_lines(1)
            .label_style(("sans-serif", FONT_SIZE))
            .axis_desc_style(("sans-serif", FONT_SIZE))
            .y_labels(count)
            .y_label_formatter(&label_of)
            .x_desc(table.measure.as_str())
            .draw()
            .map_err(|e| failed(e.to_string()))?;
        chart
            .draw_series(bars.iter().enumerate().map(|(index, bar)| {
                let colour = PALETTE[bar.column % PALETTE.len()];
                let at = segment(index);
                let mut rectangle = Rectangle::new(
                    [
                        (bar.value.min(0.0), SegmentValue::Exact(at + 1)),
                        (bar.value.max(0.0), SegmentValue::Exact(at)),
                    ],
                    colour.filled(),
                );
                rectangle.set_margin(3, 3, 0, 0);
                rectangle
            }))
            .map_err(|e| failed(e.to_string()))?;
        chart
            .draw_series(bars.iter().enumerate().filter_map(|(index, bar)| {
                let (from, to) = bar.interval?;
                let at = SegmentValue::CenterOf(segment(index));
                Some(PathElement::new(
                    vec![(from, at.clone()), (to, at)],
                    BLACK.stroke_width(2),
                ))
            }))
            .map_err(|e| failed(e.to_string()))?;
        root.present().map_err(|e| failed(e.to_string()))?;
    }
    Ok(Some(svg))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::interval::Interval;
    use crate::eval::score::Tally;
    use crate::report::tables::{Cell, Row};

    fn cell(value: Option<f64>, interval: Option<(f64, f64)>) -> Cell {
        Cell {
            value,
            interval: interval.map(|(low, high)| Interval {
                estimate: (low + high) / 2.0,
                low,
                high,
                level: 0.95,
                units: 6,
            }),
            tally: Tally::default(),
            rated: None,
            scenarios: 6,
            p_value: None,
            p_holm: None,
            note: None,
            counted: None,
        }
    }

    fn table(measure: &str, rows: Vec<Row>) -> Table {
        Table {
            id: "t".to_string(),
            title: "T".to_string(),
            measure: measure.to_string(),
            row_header: vec!["model".to_string()],
            columns: vec!["expression".to_string(), "avg".to_string()],
            rows,
            resampling_unit: "scenarios".to_string(),
            when_empty: "nothing".to_string(),
            chart: true,
        }
    }

    /// One bar per cell with a value, labelled by row and column, each interval a whisker;
    /// labels are escaped.
    #[test]
    fn a_bar_and_a_whisker_per_cell_with_a_value() {
        let rows = vec![
            Row {
                label: vec!["m<1>".to_string()],
                cells: vec![cell(Some(50.0), Some((40.0, 60.0))), cell(Some(70.0), None)],
            },
            Row {
                label: vec!["m2".to_string()],
                cells: vec![cell(None, None), cell(Some(25.0), Some((10.0, 30.0)))],
            },
        ];
        let svg = score_chart(&table(super::super::tables::SCORE_MEASURE, rows))
            .unwrap()
            .unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("m&lt;1&gt; · expression"), "{svg}");
        assert!(svg.contains("m2 · avg") && !svg.contains("m2 · expression"));
        // Three bars in the palette's first two colours, two whiskers.
        let bars =
            svg.matches("fill=\"#0072B2\"").count() + svg.matches("fill=\"#E69F00\"").count();
        assert_eq!(bars, 3, "{svg}");
        assert_eq!(svg.matches("stroke-width=\"2\"").count(), 2, "{svg}");
    }

    #[test]
    fn a_table_without_values_has_no_chart() {
        let rows = vec![Row {
            label: vec!["m".to_string()],
            cells: vec![cell(None, None), cell(None, None)],
        }];
        assert!(score_chart(&table("score 0-100", rows)).unwrap().is_none());
    }

    #[test]
    fn differences_are_drawn_from_zero_with_room_below_it() {
        let rows = vec![Row {
            label: vec!["m".to_string()],
            cells: vec![
                cell(Some(-20.0), Some((-35.0, -5.0))),
                cell(Some(10.0), None),
            ],
        }];
        let table = table("score difference", rows);
        let bars = [-20.0, 10.0].map(|value| Bar {
            label: String::new(),
            column: 0,
            value,
            interval: None,
        });
        let (low, high) = axis_span(&table, &bars);
        assert!(low < -20.0 && high > 10.0, "{low} {high}");
        assert!(score_chart(&table).unwrap().is_some());
    }
}
