//! Intersection over union and greedy non-maximum suppression, shared by every detector.

/// `[x1, y1, x2, y2]` in pixels, `x1 <= x2`, `y1 <= y2`.
pub type BoxXyxy = [f32; 4];

pub fn area(bbox: &BoxXyxy) -> f32 {
    (bbox[2] - bbox[0]).max(0.0) * (bbox[3] - bbox[1]).max(0.0)
}

/// 0 for disjoint or degenerate boxes. Coordinates are continuous (no "+1" pixel convention),
/// so a box and itself have IoU exactly 1.
pub fn iou(a: &BoxXyxy, b: &BoxXyxy) -> f32 {
    let width = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let height = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let intersection = width * height;
    let union = area(a) + area(b) - intersection;
    if union > 0.0 {
        intersection / union
    } else {
        0.0
    }
}

/// Indices of the boxes kept by greedy NMS, best score first: a box is dropped when it overlaps
/// an already kept one by IoU strictly above `iou_threshold`. Equal scores keep input order, so
/// the result does not depend on the sort's stability.
pub fn nms(boxes: &[BoxXyxy], scores: &[f32], iou_threshold: f32) -> Vec<usize> {
    assert_eq!(boxes.len(), scores.len(), "one score per box");
    let mut order: Vec<usize> = (0..boxes.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut kept: Vec<usize> = Vec::new();
    for candidate in order {
        if kept
            .iter()
            .all(|&k| iou(&boxes[k], &boxes[candidate]) <= iou_threshold)
        {
            kept.push(candidate);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iou_of_known_overlaps() {
        let a = [0.0, 0.0, 10.0, 10.0];
        assert_eq!(iou(&a, &a), 1.0);
        assert_eq!(iou(&a, &[20.0, 20.0, 30.0, 30.0]), 0.0);
        // Half of a shifted over: intersection 50, union 150.
        assert!((iou(&a, &[5.0, 0.0, 15.0, 10.0]) - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(iou(&[0.0, 0.0, 0.0, 0.0], &[0.0, 0.0, 0.0, 0.0]), 0.0);
    }

    #[test]
    fn nms_drops_overlapping_lower_scores_only() {
        let boxes = [
            [0.0, 0.0, 10.0, 10.0],
            [1.0, 0.0, 11.0, 10.0],   // IoU 0.82 with the first
            [50.0, 50.0, 60.0, 60.0], // disjoint
            [6.0, 0.0, 16.0, 10.0],   // IoU 1/3 with the second, 1/4 with the first
        ];
        let scores = [0.8, 0.9, 0.3, 0.7];
        assert_eq!(nms(&boxes, &scores, 0.4), vec![1, 3, 2]);
        // Nothing overlaps by more than IoU 1.
        assert_eq!(nms(&boxes, &scores, 1.0), vec![1, 0, 3, 2]);
    }

    #[test]
    fn equal_scores_keep_input_order() {
        let boxes = [[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 10.0, 10.0]];
        assert_eq!(nms(&boxes, &[0.5, 0.5], 0.4), vec![0]);
    }
}
